#include "log/journal_entry.hpp"

#include <errno.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

#include "log/event_recorder.hpp"

namespace shim {
namespace {

// journald drops a field whose name is longer (journal-file.h's JOURNAL_FIELD_NAME_MAX).
constexpr std::size_t kMaxFieldName = 64;

void append_field(std::vector<std::string>& out, std::string_view name, std::string_view value) {
  out.push_back(fmt::format("{}={}", name, value));
}

}  // namespace

std::string journal_field_name(std::string_view key) {
  std::string name(kJournalFieldPrefix);
  for (char c : key) {
    if (c >= 'a' && c <= 'z') {
      name += static_cast<char>(c - 'a' + 'A');
    } else if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      name += c;
    } else {
      name += '_';
    }
  }
  name.resize(std::min(name.size(), kMaxFieldName));
  return name;
}

std::vector<std::string> journal_fields(const journal_event& e) {
  std::vector<std::string> out;
  out.reserve(e.fields.size() + 10);
  append_field(out, "MESSAGE", e.line);
  append_field(out, "MESSAGE_ID", message_id_of(e.kind));
  append_field(out, "PRIORITY", fmt::format("{}", static_cast<int>(level_of(e.kind))));
  // What sd_journal_sendv adds, so that `journalctl -t shutdown-shim` finds these entries too.
  append_field(out, "SYSLOG_IDENTIFIER", program_invocation_short_name);
  append_field(out, journal_field_name("event"), to_string(e.kind));
  if (!e.cause.empty()) append_field(out, journal_field_name("cause"), e.cause);
  append_field(out, journal_field_name("message"), e.message);
  append_field(out, journal_field_name("wall"), e.wall);
  append_field(out, journal_field_name("monotonic_us"), fmt::format("{}", e.monotonic_us));
  append_field(out, journal_field_name("boottime_us"), fmt::format("{}", e.boottime_us));
  for (const auto& [key, value] : e.fields) {
    append_field(out, journal_field_name(event_record_key(key)), value);
  }
  return out;
}

std::string native_datagram(const std::vector<std::string>& fields) {
  std::string out;
  for (const std::string& field : fields) {
    const std::size_t equals = field.find('=');
    const std::string_view value = std::string_view(field).substr(equals + 1);
    if (value.find('\n') == std::string_view::npos) {
      out += field;
    } else {
      out.append(field, 0, equals);
      out += '\n';
      std::uint64_t size = value.size();
      for (int byte = 0; byte < 8; ++byte) {
        out += static_cast<char>(size & 0xFF);
        size >>= 8;
      }
      out += value;
    }
    out += '\n';
  }
  return out;
}

}  // namespace shim
