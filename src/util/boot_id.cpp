#include "util/boot_id.hpp"

#include <systemd/sd-id128.h>

#include "util/small_file.hpp"

namespace shim {
namespace {

constexpr const char* kBootIdFile = "/proc/sys/kernel/random/boot_id";
// A UUID and its newline.
constexpr std::size_t kMaxBootIdBytes = 64;

}  // namespace

// Read as every other file is (small_file.hpp) rather than by sd_id128_get_boot, which caches the
// first answer for the life of the process and opens the path its own way.
result<std::string> current_boot_id() {
  using R = result<std::string>;
  auto text = read_small_file(kBootIdFile, kMaxBootIdBytes);
  if (!text) return R::failure_from(text);
  std::string& uuid = text.value();
  if (!uuid.empty() && uuid.back() == '\n') uuid.pop_back();
  sd_id128_t id;
  if (sd_id128_from_string(uuid.c_str(), &id) < 0) {
    return R::failure(std::string(kBootIdFile) + ": not a boot id");
  }
  char out[SD_ID128_STRING_MAX];
  return R::success(sd_id128_to_string(id, out));
}

}  // namespace shim
