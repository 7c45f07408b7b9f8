#include "report/boot_journal.hpp"

#include <algorithm>
#include <string_view>

#include "report/journal_handle.hpp"

namespace shim {
namespace {

constexpr std::string_view kLogindTimeout = "but inhibitor timeout is reached";
constexpr std::string_view kMessageField = "MESSAGE=";

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
