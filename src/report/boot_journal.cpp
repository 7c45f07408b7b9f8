#include "report/boot_journal.hpp"

#include <systemd/sd-journal.h>

#include <algorithm>
#include <memory>
#include <string_view>

namespace shim {
namespace {

constexpr std::string_view kLogindTimeout = "but inhibitor timeout is reached";
constexpr std::string_view kMessageField = "MESSAGE=";

struct journal_closer {
  void operator()(sd_journal* j) const { sd_journal_close(j); }
};
using journal_ptr = std::unique_ptr<sd_journal, journal_closer>;

journal_ptr open_journal(const std::string& directory) {
  sd_journal* j = nullptr;
  const int r = directory.empty() ? sd_journal_open(&j, SD_JOURNAL_LOCAL_ONLY)
                                  : sd_journal_open_directory(&j, directory.c_str(), 0);
  if (r < 0) return nullptr;
  return journal_ptr(j);
}

bool add_match(sd_journal* j, const std::string& match) {
  return sd_journal_add_match(j, match.data(), match.size()) >= 0;
}

}  // namespace

cut_short_cause find_cut_short_cause(const std::string& boot_id,
                                     std::optional<std::int64_t> unready_us,
                                     const std::string& directory) {
  cut_short_cause out;
  sd_id128_t id;
  if (sd_id128_from_string(boot_id.c_str(), &id) < 0) return out;
  journal_ptr j = open_journal(directory);
  if (!j) return out;
  const std::string boot_match = "_BOOT_ID=" + boot_id;
  if (!add_match(j.get(), boot_match) || sd_journal_next(j.get()) <= 0) return out;

  // Only logind's own lines of that boot.
  sd_journal_flush_matches(j.get());
  if (!add_match(j.get(), boot_match) || !add_match(j.get(), "SYSLOG_IDENTIFIER=systemd-logind")) {
    return out;
  }
  out.what = cut_short_cause::kind::shim_died;
  if (unready_us && *unready_us > 0) {
    sd_journal_seek_monotonic_usec(j.get(), id, static_cast<std::uint64_t>(*unready_us));
  } else {
    sd_journal_seek_head(j.get());
  }
  while (sd_journal_next(j.get()) > 0) {
    const void* data = nullptr;
    std::size_t size = 0;
    if (sd_journal_get_data(j.get(), "MESSAGE", &data, &size) < 0) continue;
    std::string_view message(static_cast<const char*>(data), size);
    message.remove_prefix(std::min(message.size(), kMessageField.size()));
    if (message.find(kLogindTimeout) != std::string_view::npos) {
      out.what = cut_short_cause::kind::logind_timeout;
      out.evidence = message;
      break;
    }
  }
  return out;
}

}  // namespace shim
