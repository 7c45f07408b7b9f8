#pragma once

// The logger (stderr) and the event recorder (--event-log), for the files that use both.
#include "log/event_recorder.hpp"
#include "log/logger.hpp"
