#pragma once

#include "config/config.hpp"
#include "control/control_desk.hpp"
#include "core/shutdown_sequence.hpp"
#include "kubelet/kubelet_watch.hpp"
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
#include "logind/logind_settings.hpp"
#include "process/target_watch.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// What each part of the daemon is built with, read from the command line's config: the one place
// that knows both, so that nothing below the daemon includes config/.
shutdown_sequence::settings sequence_settings(const config& cfg);
// What a SIGTERM to the shim does, and the words for why.
shutdown_sequence::forwarding sigterm_forwarding(const config& cfg);
logind_settings logind_settings_of(const config& cfg);
control_desk::settings control_settings(const config& cfg);
kubelet_watch::settings kubelet_settings(const config& cfg);
target_watch::settings target_settings(const config& cfg);
// The readiness table before anything has been heard: the plan and kubelet's outlook as the
// flags make them, and where /metrics reads what logging lost.
shim_status initial_status(const config& cfg, const logger& log, const event_recorder& events);

}  // namespace shim
