#include "boot_id.hpp"

#include <systemd/sd-id128.h>

namespace shim {

std::string current_boot_id() {
  sd_id128_t id;
  if (sd_id128_get_boot(&id) < 0) return {};
  char text[SD_ID128_STRING_MAX];
  return sd_id128_to_string(id, text);
}

}  // namespace shim
