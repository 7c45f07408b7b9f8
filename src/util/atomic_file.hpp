#pragma once

#include <filesystem>
#include <string_view>

namespace shim {

// Creates the directory if needed and replaces the file atomically (temp file, rename), mode 0644.
// Throws std::system_error naming the path. power_loss: the file and the rename are fsync'ed, so
// the new content survives a crash of the machine; process_crash: only a crash of the process
// (readers see the old or the new file, whole), without the fsyncs' wait.
enum class durability { power_loss, process_crash };
void write_file_atomically(const std::filesystem::path& file, std::string_view content,
                           durability survives = durability::power_loss);

}  // namespace shim
