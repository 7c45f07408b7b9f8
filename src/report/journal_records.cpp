#include "report/journal_records.hpp"

#include <fmt/format.h>

#include <cstring>

#include "log/event_kind.hpp"
#include "log/journal_entry.hpp"
#include "report/journal_handle.hpp"

namespace shim {

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

}  // namespace shim
