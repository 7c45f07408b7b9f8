#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "report/event_line_reader.hpp"
#include "util/result.hpp"

namespace shim {

// The shim's entries in the journal as event records, oldest first: the same records the event log
// holds (journal_entry.hpp writes them), so that `shutdown-shim report --journal` judges them by
// the same rules. Only entries with one of kEvents' MESSAGE_IDs from a process of root (_UID=0):
// any user may send journald an entry with those fields, as any user may not write the event log.
// Each entry's SHUTDOWN_SHIM_<KEY> is the record's key, its _BOOT_ID the boot_id, its _PID the pid.
//
// directory: empty: this machine's journal, else the journal files in it (journalctl -D).
// Returns how many entries were read; an error when the journal cannot be opened.
result<std::uint64_t> read_journal_records(const std::string& directory,
                                           const std::function<void(const event_record&)>& record);

// The record of one entry, given its fields "NAME=value" one by one.
void set_journal_member(event_record& r, std::string_view field);

}  // namespace shim
