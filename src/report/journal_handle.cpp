#include "report/journal_handle.hpp"

namespace shim {

journal_ptr open_journal(const std::string& directory) {
  sd_journal* j = nullptr;
  const int r = directory.empty() ? sd_journal_open(&j, SD_JOURNAL_LOCAL_ONLY)
                                  : sd_journal_open_directory(&j, directory.c_str(), 0);
  if (r < 0) return nullptr;
  return journal_ptr(j);
}

bool add_match(sd_journal* j, std::string_view match) {
  return sd_journal_add_match(j, match.data(), match.size()) >= 0;
}

}  // namespace shim
