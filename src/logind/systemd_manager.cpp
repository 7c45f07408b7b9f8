#include "logind/systemd_manager.hpp"

#include <signal.h>

#include <boost/asio/post.hpp>

namespace shim {

namespace {

constexpr const char* kManagerName = "org.freedesktop.systemd1";
constexpr const char* kManagerPath = "/org/freedesktop/systemd1";
constexpr const char* kManagerInterface = "org.freedesktop.systemd1.Manager";

}  // namespace

void systemd_manager::lost() {
  // The calls died with the connection; their handlers were told by sd-bus as it closed.
  state_call_.reset();
  reload_call_.reset();
  bus_ = nullptr;
}

template <typename T>
bool systemd_manager::refuse_when_down(std::function<void(result<T>)>& done) {
  if (bus_) return false;
  boost::asio::post(io_, [done = std::move(done)] {
    done(result<T>::failure("not connected to the system bus"));
  });
  return true;
}

void systemd_manager::system_state(std::function<void(result<std::string>)> done) {
  using state = result<std::string>;
  if (refuse_when_down(done)) return;
  state_call_ =
      get_property(*bus_, kManagerName, kManagerPath, kManagerInterface, "SystemState",
                   [done = std::move(done)](result<sd_bus_message*> reply) {
                     const char* text = nullptr;
                     if (!reply) return done(state::failure_from(reply));
                     if (sd_bus_message_read(reply.value(), "v", "s", &text) < 0 || !text) {
                       return done(state::failure("bad SystemState reply"));
                     }
                     done(state::success(text));
                   });
}

void systemd_manager::reload_logind(std::function<void(result<>)> done) {
  if (refuse_when_down(done)) return;
  reload_call_ = call_method(
      *bus_, {kManagerName, kManagerPath, kManagerInterface, "KillUnit"},
      [](sd_bus_message* m) {
        return sd_bus_message_append(m, "ssi", "systemd-logind.service", "all", SIGHUP);
      },
      [done = std::move(done)](result<sd_bus_message*> reply) {
        done(reply ? result<>::success() : result<>::failure_from(reply));
      });
}

}  // namespace shim
