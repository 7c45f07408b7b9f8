#pragma once

#include <systemd/sd-journal.h>

#include <memory>
#include <string>
#include <string_view>

namespace shim {

struct journal_closer {
  void operator()(sd_journal* j) const { sd_journal_close(j); }
};
using journal_ptr = std::unique_ptr<sd_journal, journal_closer>;

// The local journal (directory empty: this machine's, sd_journal_open(SD_JOURNAL_LOCAL_ONLY)) or
// the files in directory (journalctl -D). nullptr when it cannot be opened.
journal_ptr open_journal(const std::string& directory);

// A match "FIELD=value" (sd_journal_add_match: the same field twice is either, two fields both).
bool add_match(sd_journal* j, std::string_view match);

}  // namespace shim
