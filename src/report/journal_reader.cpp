#include "report/journal_reader.hpp"

#include <fmt/format.h>
#include <systemd/sd-journal.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "log/journal_entry.hpp"

namespace shim {

namespace {

struct journal_closer {
  void operator()(sd_journal* j) const { sd_journal_close(j); }
};
using journal_ptr = std::unique_ptr<sd_journal, journal_closer>;

// The local journal (sd_journal_open(SD_JOURNAL_LOCAL_ONLY)) or the files in directory. nullptr
// when it cannot be opened.
journal_ptr open_journal(const std::string& directory) {
  sd_journal* j = nullptr;
  const int r = directory.empty() ? sd_journal_open(&j, SD_JOURNAL_LOCAL_ONLY)
                                  : sd_journal_open_directory(&j, directory.c_str(), 0);
  if (r < 0) return nullptr;
  return journal_ptr(j);
}

// A match "FIELD=value" (sd_journal_add_match: the same field twice is either, two fields both).
bool add_match(sd_journal* j, std::string_view match) {
  return sd_journal_add_match(j, match.data(), match.size()) >= 0;
}

constexpr std::string_view kLogindTimeout = "but inhibitor timeout is reached";
constexpr std::string_view kMessageField = "MESSAGE=";

}  // namespace

void set_journal_member(event_record& r, std::string_view field) {
  const auto equals = field.find('=');
  if (equals == std::string_view::npos) return;
  const std::string_view name = field.substr(0, equals);
  std::string value(field.substr(equals + 1));
  // journald's own fields, which the sender cannot set: the same as the record's.
  if (name == "_BOOT_ID") {
    set_event_member(r, "boot_id", std::move(value));
  } else if (name == "_PID") {
    set_event_member(r, "pid", std::move(value));
  } else if (name.starts_with(kJournalFieldPrefix)) {
    std::string key(name.substr(kJournalFieldPrefix.size()));
    for (char& c : key) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    set_event_member(r, key, std::move(value));
  }
}

result<std::uint64_t> read_journal_records(const std::string& directory,
                                           const std::function<void(const event_record&)>& record) {
  const std::string where = directory.empty() ? "the journal" : "the journal in " + directory;
  journal_ptr j = open_journal(directory);
  if (!j) return result<std::uint64_t>::failure("cannot open " + where);
  bool matched = true;
  for (const event_info& e : kEvents) {
    matched = matched && add_match(j.get(), fmt::format("MESSAGE_ID={}", e.message_id));
  }
  matched = matched && add_match(j.get(), "_UID=0");
  if (!matched) return result<std::uint64_t>::failure("cannot search " + where);

  std::uint64_t entries = 0;
  for (;;) {
    const int next = sd_journal_next(j.get());
    if (next == 0) break;
    if (next < 0) {
      return result<std::uint64_t>::failure(
          fmt::format("cannot read {}: {}", where, std::strerror(-next)));
    }
    event_record r;
    const void* data = nullptr;
    std::size_t size = 0;
    SD_JOURNAL_FOREACH_DATA(j.get(), data, size) {
      set_journal_member(r, std::string_view(static_cast<const char*>(data), size));
    }
    ++entries;
    if (!r.event.empty()) record(r);
  }
  return result<std::uint64_t>::success(entries);
}

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

  // Only logind's own lines of that boot, told by what journald itself records of the sender:
  // root, and logind's unit or command name. SYSLOG_IDENTIFIER is the sender's to say: any user
  // could turn "SIGKILL or crash" into logind's timeout with it (issue 35, item 4).
  sd_journal_flush_matches(j.get());
  const bool matched = add_match(j.get(), boot_match) && add_match(j.get(), "_UID=0") &&
                       add_match(j.get(), "_SYSTEMD_UNIT=systemd-logind.service") &&
                       sd_journal_add_disjunction(j.get()) >= 0 && add_match(j.get(), boot_match) &&
                       add_match(j.get(), "_UID=0") && add_match(j.get(), "_COMM=systemd-logind");
  if (!matched) return out;
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
