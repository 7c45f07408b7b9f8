// A stand-in for PID 1's org.freedesktop.systemd1 on a sandbox's private bus: enough of the manager
// for systemd-logind to start up and to carry out Reboot(), plus a test-control interface
// (org.shutdownshim.Test1) through which tests steer it and read back what it was asked to do.
//
// It refuses to connect to anything but the address given with --address, and never to the
// machine's own system bus. It survives a restart of the dbus-daemon: on disconnect it reconnects
// (bounded) and takes its name again, keeping its records.

#include <fmt/core.h>
#include <signal.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kManagerPath = "/org/freedesktop/systemd1";
constexpr const char* kManagerInterface = "org.freedesktop.systemd1.Manager";
constexpr const char* kUnitInterface = "org.freedesktop.systemd1.Unit";
constexpr const char* kTestInterface = "org.shutdownshim.Test1";
constexpr std::uint64_t kReconnectIntervalUs = 50'000;
constexpr std::uint64_t kReconnectDeadlineUs = 30'000'000;

std::uint64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000u;
}

void log_line(std::string_view text) {
  fmt::print(stderr, "fake-systemd-manager[{}] {}: {}\n", getpid(), monotonic_us(), text);
  std::fflush(stderr);
}

struct start_unit_call {
  std::string unit;
  std::string mode;
  std::uint64_t usec;
};

struct kill_unit_call {
  std::string unit;
  std::string who;
  std::int32_t signal;
  std::uint64_t usec;
};

struct kill_report {
  std::uint32_t pid;
  bool was_alive;
  std::uint64_t usec;
};

struct unit_object {
  std::string id;
  std::string path;
  std::string load_state = "loaded";
  std::string active_state = "inactive";
};

struct manager_state {
  std::string address;
  sd_event* event = nullptr;
  sd_bus* bus = nullptr;
  sd_event_source* reconnect_timer = nullptr;
  std::uint64_t reconnect_deadline = 0;

  std::string system_state = "running";
  std::uint32_t next_job_id = 1;
  std::uint32_t last_job_id = 0;
  std::string last_job_path;
  std::string last_job_unit;
  std::vector<start_unit_call> start_calls;
  std::vector<kill_unit_call> kill_calls;
  std::vector<std::uint32_t> kill_on_reboot;
  // SetStopOnReboot: PIDs that get SIGTERM when reboot.target starts (systemd stopping their
  // units), and how long the kill of everything waits for them (the unit's stop timeout).
  std::vector<std::uint32_t> stop_on_reboot;
  std::uint64_t stop_timeout_us = 0;
  sd_event_source* stop_timer = nullptr;
  std::vector<kill_report> kill_reports;
  std::map<std::string, std::uint32_t> main_pids;  // unit -> PID, for KillUnit
  std::vector<unit_object> units;
};

manager_state g;  // sd-bus callbacks get it through userdata; a global keeps ownership simple

std::string unit_path(std::string_view unit) {
  // sd-bus's own escaping of object path labels ("reboot.target" -> "reboot_2etarget").
  char* path = nullptr;
  if (sd_bus_path_encode("/org/freedesktop/systemd1/unit", std::string(unit).c_str(), &path) < 0) {
    return {};
  }
  std::string result(path);
  std::free(path);
  return result;
}

unit_object* find_unit(std::string_view id) {
  for (auto& u : g.units) {
    if (u.id == id) return &u;
  }
  return nullptr;
}

int emit_job_removed(sd_bus* bus, std::uint32_t id, const std::string& job, const std::string& unit,
                     const char* result) {
  return sd_bus_emit_signal(bus, kManagerPath, kManagerInterface, "JobRemoved", "uoss", id,
                            job.c_str(), unit.c_str(), result);
}

// Kills the processes a test registered with SetKillOnReboot: what a real reboot does to whatever
// is still running when reboot.target is reached.
void kill_registered_processes() {
  for (std::uint32_t pid : g.kill_on_reboot) {
    const bool alive = kill(static_cast<pid_t>(pid), 0) == 0;
    if (alive) kill(static_cast<pid_t>(pid), SIGKILL);
    g.kill_reports.push_back({pid, alive, monotonic_us()});
    log_line(fmt::format("reboot.target: SIGKILL pid {} (alive: {})", pid, alive));
  }
  g.kill_on_reboot.clear();
}

int on_stop_timeout(sd_event_source*, std::uint64_t, void*) {
  log_line("reboot.target: stop timeout over");
  kill_registered_processes();
  return 0;
}

// What systemd does to a unit still running when reboot.target is started: SIGTERM, then SIGKILL
// once the stop timeout has passed. Every registered PID is SIGKILLed at that moment (the whole
// node going down), including the stopped ones if they are still there.
void stop_then_kill_registered_processes() {
  for (std::uint32_t pid : g.stop_on_reboot) {
    const bool alive = kill(static_cast<pid_t>(pid), SIGTERM) == 0;
    log_line(fmt::format("reboot.target: SIGTERM pid {} (alive: {}), SIGKILL in {} us", pid, alive,
                         g.stop_timeout_us));
    g.kill_on_reboot.push_back(pid);
  }
  g.stop_on_reboot.clear();
  if (g.stop_timer) sd_event_source_unref(g.stop_timer);
  g.stop_timer = nullptr;
  if (sd_event_add_time(g.event, &g.stop_timer, CLOCK_MONOTONIC, monotonic_us() + g.stop_timeout_us,
                        0, on_stop_timeout, nullptr) < 0) {
    kill_registered_processes();
  }
}

// --- org.freedesktop.systemd1.Manager
// -------------------------------------------------------------

int method_start_unit(sd_bus_message* m, void*, sd_bus_error*) {
  const char* unit = nullptr;
  const char* mode = nullptr;
  int r = sd_bus_message_read(m, "ss", &unit, &mode);
  if (r < 0) return r;
  const std::uint64_t now = monotonic_us();
  g.start_calls.push_back({unit, mode, now});
  const std::uint32_t id = g.next_job_id++;
  g.last_job_id = id;
  g.last_job_path = fmt::format("/org/freedesktop/systemd1/job/{}", id);
  g.last_job_unit = unit;
  log_line(fmt::format("StartUnit({}, {}) from {} -> job {}", unit, mode,
                       sd_bus_message_get_sender(m) ? sd_bus_message_get_sender(m) : "?", id));
  if (std::string_view(unit) == "reboot.target" || std::string_view(unit) == "poweroff.target" ||
      std::string_view(unit) == "halt.target") {
    if (g.stop_on_reboot.empty()) {
      kill_registered_processes();
    } else {
      stop_then_kill_registered_processes();
    }
  }
  r = sd_bus_reply_method_return(m, "o", g.last_job_path.c_str());
  if (r < 0) return r;
  sd_bus* bus = sd_bus_message_get_bus(m);
  // Like the real manager: announce the job; tests wait for this rather than polling.
  sd_bus_emit_signal(bus, kManagerPath, kManagerInterface, "JobNew", "uos", id,
                     g.last_job_path.c_str(), unit);
  sd_bus_emit_signal(bus, kManagerPath, kTestInterface, "StartUnitCalled", "sst", unit, mode, now);
  return 1;
}

int method_stop_unit(sd_bus_message* m, void*, sd_bus_error*) {
  const char* unit = nullptr;
  const char* mode = nullptr;
  int r = sd_bus_message_read(m, "ss", &unit, &mode);
  if (r < 0) return r;
  log_line(fmt::format("StopUnit({}, {})", unit, mode));
  const std::uint32_t id = g.next_job_id++;
  return sd_bus_reply_method_return(m, "o",
                                    fmt::format("/org/freedesktop/systemd1/job/{}", id).c_str());
}

int method_get_unit(sd_bus_message* m, void*, sd_bus_error* error) {
  const char* unit = nullptr;
  int r = sd_bus_message_read(m, "s", &unit);
  if (r < 0) return r;
  log_line(fmt::format("{}({})", sd_bus_message_get_member(m), unit));
  if (!find_unit(unit)) {
    return sd_bus_error_setf(error, "org.freedesktop.systemd1.NoSuchUnit", "Unit %s not loaded.",
                             unit);
  }
  return sd_bus_reply_method_return(m, "o", unit_path(unit).c_str());
}

int method_kill_unit(sd_bus_message* m, void*, sd_bus_error*) {
  const char* unit = nullptr;
  const char* who = nullptr;
  std::int32_t sig = 0;
  int r = sd_bus_message_read(m, "ssi", &unit, &who, &sig);
  if (r < 0) return r;
  g.kill_calls.push_back({unit, who, sig, monotonic_us()});
  log_line(fmt::format("KillUnit({}, {}, {})", unit, who, sig));
  // Only a unit whose main PID a test registered is signalled (e.g. logind for a SIGHUP reload).
  if (auto it = g.main_pids.find(unit); it != g.main_pids.end()) {
    kill(static_cast<pid_t>(it->second), sig);
  }
  return sd_bus_reply_method_return(m, "");
}

int method_noop(sd_bus_message* m, void*, sd_bus_error*) {
  log_line(fmt::format("{}() from {}", sd_bus_message_get_member(m),
                       sd_bus_message_get_sender(m) ? sd_bus_message_get_sender(m) : "?"));
  return sd_bus_reply_method_return(m, "");
}

int property_system_state(sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                          void*, sd_bus_error*) {
  return sd_bus_message_append(reply, "s", g.system_state.c_str());
}

const sd_bus_vtable kManagerVtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("SystemState", "s", property_system_state, 0,
                    SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
    SD_BUS_METHOD("StartUnit", "ss", "o", method_start_unit, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("StopUnit", "ss", "o", method_stop_unit, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("GetUnit", "s", "o", method_get_unit, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("LoadUnit", "s", "o", method_get_unit, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("KillUnit", "ssi", "", method_kill_unit, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("Subscribe", "", "", method_noop, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("Unsubscribe", "", "", method_noop, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("Reload", "", "", method_noop, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_SIGNAL("JobNew", "uos", 0),
    SD_BUS_SIGNAL("JobRemoved", "uoss", 0),
    SD_BUS_SIGNAL("UnitRemoved", "so", 0),
    SD_BUS_SIGNAL("Reloading", "b", 0),
    SD_BUS_VTABLE_END,
};

// --- org.freedesktop.systemd1.Unit (one object per known unit)
// --------------------------------------

int property_unit_string(sd_bus*, const char*, const char*, const char* property,
                         sd_bus_message* reply, void* userdata, sd_bus_error*) {
  const auto* unit = static_cast<const unit_object*>(userdata);
  std::string_view p(property);
  const std::string& value = p == "Id"          ? unit->id
                             : p == "LoadState" ? unit->load_state
                                                : unit->active_state;
  return sd_bus_message_append(reply, "s", value.c_str());
}

const sd_bus_vtable kUnitVtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_PROPERTY("Id", "s", property_unit_string, 0, SD_BUS_VTABLE_PROPERTY_CONST),
    SD_BUS_PROPERTY("LoadState", "s", property_unit_string, 0, SD_BUS_VTABLE_PROPERTY_CONST),
    SD_BUS_PROPERTY("ActiveState", "s", property_unit_string, 0, 0),
    SD_BUS_VTABLE_END,
};

// --- org.shutdownshim.Test1 ---------------------------------------------------------------------

int method_set_system_state(sd_bus_message* m, void*, sd_bus_error*) {
  const char* state = nullptr;
  int r = sd_bus_message_read(m, "s", &state);
  if (r < 0) return r;
  g.system_state = state;
  log_line(fmt::format("SystemState := {}", state));
  sd_bus_emit_properties_changed(sd_bus_message_get_bus(m), kManagerPath, kManagerInterface,
                                 "SystemState", nullptr);
  return sd_bus_reply_method_return(m, "");
}

// Ends the last job with the given result: "canceled" is what logind sees when a reboot is called
// off, and answers with PrepareForShutdown(false).
int remove_last_job(sd_bus_message* m, const char* result, sd_bus_error* error) {
  if (g.last_job_id == 0) {
    return sd_bus_error_set(error, "org.shutdownshim.Test1.NoJob", "No job was started yet.");
  }
  log_line(fmt::format("JobRemoved({}, {}, {}, {})", g.last_job_id, g.last_job_path,
                       g.last_job_unit, result));
  int r = emit_job_removed(sd_bus_message_get_bus(m), g.last_job_id, g.last_job_path,
                           g.last_job_unit, result);
  if (r < 0) return r;
  g.last_job_id = 0;
  return sd_bus_reply_method_return(m, "");
}

int method_cancel_last_job(sd_bus_message* m, void*, sd_bus_error* error) {
  return remove_last_job(m, "canceled", error);
}

int method_finish_last_job(sd_bus_message* m, void*, sd_bus_error* error) {
  const char* result = nullptr;
  int r = sd_bus_message_read(m, "s", &result);
  if (r < 0) return r;
  return remove_last_job(m, result, error);
}

int method_start_unit_calls(sd_bus_message* m, void*, sd_bus_error*) {
  sd_bus_message* reply = nullptr;
  int r = sd_bus_message_new_method_return(m, &reply);
  if (r < 0) return r;
  r = sd_bus_message_open_container(reply, 'a', "(sst)");
  for (const auto& c : g.start_calls) {
    if (r < 0) break;
    r = sd_bus_message_append(reply, "(sst)", c.unit.c_str(), c.mode.c_str(), c.usec);
  }
  if (r >= 0) r = sd_bus_message_close_container(reply);
  if (r >= 0) r = sd_bus_send(nullptr, reply, nullptr);
  sd_bus_message_unref(reply);
  return r < 0 ? r : 1;
}

int method_kill_unit_calls(sd_bus_message* m, void*, sd_bus_error*) {
  sd_bus_message* reply = nullptr;
  int r = sd_bus_message_new_method_return(m, &reply);
  if (r < 0) return r;
  r = sd_bus_message_open_container(reply, 'a', "(ssit)");
  for (const auto& c : g.kill_calls) {
    if (r < 0) break;
    r = sd_bus_message_append(reply, "(ssit)", c.unit.c_str(), c.who.c_str(), c.signal, c.usec);
  }
  if (r >= 0) r = sd_bus_message_close_container(reply);
  if (r >= 0) r = sd_bus_send(nullptr, reply, nullptr);
  sd_bus_message_unref(reply);
  return r < 0 ? r : 1;
}

int method_set_kill_on_reboot(sd_bus_message* m, void*, sd_bus_error*) {
  const void* data = nullptr;
  std::size_t size = 0;
  int r = sd_bus_message_read_array(m, 'u', &data, &size);
  if (r < 0) return r;
  const auto* pids = static_cast<const std::uint32_t*>(data);
  g.kill_on_reboot.assign(pids, pids + size / sizeof(std::uint32_t));
  log_line(fmt::format("kill on reboot: {} PIDs", g.kill_on_reboot.size()));
  return sd_bus_reply_method_return(m, "");
}

int method_set_stop_on_reboot(sd_bus_message* m, void*, sd_bus_error*) {
  const void* data = nullptr;
  std::size_t size = 0;
  int r = sd_bus_message_read_array(m, 'u', &data, &size);
  if (r < 0) return r;
  std::uint64_t timeout_us = 0;
  r = sd_bus_message_read(m, "t", &timeout_us);
  if (r < 0) return r;
  const auto* pids = static_cast<const std::uint32_t*>(data);
  g.stop_on_reboot.assign(pids, pids + size / sizeof(std::uint32_t));
  g.stop_timeout_us = timeout_us;
  log_line(fmt::format("stop on reboot: {} PIDs, stop timeout {} us", g.stop_on_reboot.size(),
                       timeout_us));
  return sd_bus_reply_method_return(m, "");
}

int method_killed_on_reboot(sd_bus_message* m, void*, sd_bus_error*) {
  sd_bus_message* reply = nullptr;
  int r = sd_bus_message_new_method_return(m, &reply);
  if (r < 0) return r;
  r = sd_bus_message_open_container(reply, 'a', "(ubt)");
  for (const auto& k : g.kill_reports) {
    if (r < 0) break;
    r = sd_bus_message_append(reply, "(ubt)", k.pid, static_cast<int>(k.was_alive), k.usec);
  }
  if (r >= 0) r = sd_bus_message_close_container(reply);
  if (r >= 0) r = sd_bus_send(nullptr, reply, nullptr);
  sd_bus_message_unref(reply);
  return r < 0 ? r : 1;
}

int method_set_unit_main_pid(sd_bus_message* m, void*, sd_bus_error*) {
  const char* unit = nullptr;
  std::uint32_t pid = 0;
  int r = sd_bus_message_read(m, "su", &unit, &pid);
  if (r < 0) return r;
  if (pid == 0) {
    g.main_pids.erase(unit);
  } else {
    g.main_pids[unit] = pid;
  }
  return sd_bus_reply_method_return(m, "");
}

const sd_bus_vtable kTestVtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD("SetSystemState", "s", "", method_set_system_state, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("CancelLastJob", "", "", method_cancel_last_job, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("FinishLastJob", "s", "", method_finish_last_job, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("StartUnitCalls", "", "a(sst)", method_start_unit_calls,
                  SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("KillUnitCalls", "", "a(ssit)", method_kill_unit_calls,
                  SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("SetKillOnReboot", "au", "", method_set_kill_on_reboot,
                  SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("SetStopOnReboot", "aut", "", method_set_stop_on_reboot,
                  SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("KilledOnReboot", "", "a(ubt)", method_killed_on_reboot,
                  SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("SetUnitMainPID", "su", "", method_set_unit_main_pid, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_SIGNAL("StartUnitCalled", "sst", 0),
    SD_BUS_VTABLE_END,
};

// Logs every method call addressed to us, so that what logind asks of PID 1 shows in the log
// (including calls we do not implement, which sd-bus answers with UnknownMethod).
int filter_log_calls(sd_bus_message* m, void*, sd_bus_error*) {
  {
    std::uint8_t type = 0;
    sd_bus_message_get_type(m, &type);
    if (type == SD_BUS_MESSAGE_METHOD_CALL) {
      const char* iface = sd_bus_message_get_interface(m);
      const char* member = sd_bus_message_get_member(m);
      const char* path = sd_bus_message_get_path(m);
      const char* sender = sd_bus_message_get_sender(m);
      const char* sig = sd_bus_message_get_signature(m, 1);
      log_line(fmt::format("call {} {}.{}({}) from {}", path ? path : "?", iface ? iface : "?",
                           member ? member : "?", sig ? sig : "", sender ? sender : "?"));
    }
  }
  return 0;  // let the vtables answer
}

// --- connection management
// -------------------------------------------------------------------------

int on_disconnected(sd_bus_message*, void*, sd_bus_error*);

void drop_bus() {
  if (g.bus) {
    sd_bus_flush_close_unref(g.bus);
    g.bus = nullptr;
  }
}

int connect_bus() {
  sd_bus* bus = nullptr;
  int r = sd_bus_new(&bus);
  if (r < 0) return r;
  r = sd_bus_set_address(bus, g.address.c_str());
  if (r >= 0) r = sd_bus_set_bus_client(bus, 1);
  if (r >= 0) r = sd_bus_start(bus);
  if (r >= 0) r = sd_bus_attach_event(bus, g.event, SD_EVENT_PRIORITY_NORMAL);
  if (r >= 0) r = sd_bus_add_filter(bus, nullptr, filter_log_calls, nullptr);
  if (r >= 0) {
    r = sd_bus_add_object_vtable(bus, nullptr, kManagerPath, kManagerInterface, kManagerVtable,
                                 nullptr);
  }
  if (r >= 0) {
    r = sd_bus_add_object_vtable(bus, nullptr, kManagerPath, kTestInterface, kTestVtable, nullptr);
  }
  for (auto& u : g.units) {
    if (r < 0) break;
    r = sd_bus_add_object_vtable(bus, nullptr, u.path.c_str(), kUnitInterface, kUnitVtable, &u);
  }
  if (r >= 0) {
    r = sd_bus_match_signal(bus, nullptr, "org.freedesktop.DBus.Local",
                            "/org/freedesktop/DBus/Local", "org.freedesktop.DBus.Local",
                            "Disconnected", on_disconnected, nullptr);
  }
  if (r >= 0) r = sd_bus_request_name(bus, "org.freedesktop.systemd1", 0);
  if (r < 0) {
    sd_bus_flush_close_unref(bus);
    return r;
  }
  g.bus = bus;
  log_line(fmt::format("connected to {}, owns org.freedesktop.systemd1", g.address));
  return 0;
}

int on_reconnect_timer(sd_event_source* s, std::uint64_t, void*) {
  int r = connect_bus();
  if (r >= 0) {
    sd_event_source_set_enabled(s, SD_EVENT_OFF);
    return 0;
  }
  const std::uint64_t now = monotonic_us();
  if (now >= g.reconnect_deadline) {
    log_line(fmt::format("giving up reconnecting: {}", std::strerror(-r)));
    sd_event_exit(g.event, 1);
    return 0;
  }
  sd_event_source_set_time(s, now + kReconnectIntervalUs);
  sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
  return 0;
}

void schedule_reconnect() {
  g.reconnect_deadline = monotonic_us() + kReconnectDeadlineUs;
  if (!g.reconnect_timer) {
    sd_event_add_time(g.event, &g.reconnect_timer, CLOCK_MONOTONIC,
                      monotonic_us() + kReconnectIntervalUs, 0, on_reconnect_timer, nullptr);
  } else {
    sd_event_source_set_time(g.reconnect_timer, monotonic_us() + kReconnectIntervalUs);
  }
  sd_event_source_set_enabled(g.reconnect_timer, SD_EVENT_ONESHOT);
}

int on_disconnected(sd_bus_message*, void*, sd_bus_error*) {
  log_line("bus disconnected; reconnecting");
  drop_bus();
  schedule_reconnect();
  return 0;
}

bool refuses_address(std::string_view address) {
  // Never the machine's own system bus, whatever the caller passes.
  return address.empty() || address.find("/run/dbus/system_bus_socket") != std::string_view::npos ||
         address.find("unix:path=") != 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg(argv[i]);
    if (arg.starts_with("--address=")) {
      g.address = std::string(arg.substr(10));
    } else if (arg.starts_with("--on-reboot-kill=")) {
      std::string_view list = arg.substr(17);
      while (!list.empty()) {
        auto comma = list.find(',');
        g.kill_on_reboot.push_back(
            static_cast<std::uint32_t>(std::stoul(std::string(list.substr(0, comma)))));
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      }
    } else if (arg.starts_with("--system-state=")) {
      g.system_state = std::string(arg.substr(15));
    } else {
      fmt::print(stderr,
                 "usage: fake_systemd_manager --address=unix:path=PRIVATE_SOCKET "
                 "[--on-reboot-kill=PID,...] [--system-state=STATE]\n");
      return 2;
    }
  }
  if (refuses_address(g.address)) {
    fmt::print(stderr, "fake_systemd_manager: refusing bus address '{}': pass a private socket\n",
               g.address);
    return 2;
  }
  for (const char* id : {"reboot.target", "poweroff.target", "halt.target", "kexec.target",
                         "systemd-logind.service"}) {
    g.units.push_back({id, unit_path(id)});
  }

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, nullptr);

  int r = sd_event_new(&g.event);
  if (r < 0) {
    fmt::print(stderr, "sd_event_new: {}\n", std::strerror(-r));
    return 1;
  }
  sd_event_add_signal(g.event, nullptr, SIGTERM, nullptr, nullptr);  // default handler: exit
  sd_event_add_signal(g.event, nullptr, SIGINT, nullptr, nullptr);

  r = connect_bus();
  if (r < 0) {
    fmt::print(stderr, "fake_systemd_manager: cannot connect to {}: {}\n", g.address,
               std::strerror(-r));
    sd_event_unref(g.event);
    return 1;
  }
  r = sd_event_loop(g.event);
  drop_bus();
  if (g.reconnect_timer) sd_event_source_unref(g.reconnect_timer);
  if (g.stop_timer) sd_event_source_unref(g.stop_timer);
  sd_event_unref(g.event);
  log_line(fmt::format("exiting ({})", r));
  return r == 0 ? 0 : 1;
}
