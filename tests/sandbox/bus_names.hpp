#pragma once

// The well-known names, paths and interfaces the sandbox's programs talk to, in one place.

namespace sandbox {

inline constexpr const char* kBusDriver = "org.freedesktop.DBus";
inline constexpr const char* kBusDriverPath = "/org/freedesktop/DBus";
inline constexpr const char* kLogin1 = "org.freedesktop.login1";
inline constexpr const char* kLogin1Path = "/org/freedesktop/login1";
inline constexpr const char* kLogin1Manager = "org.freedesktop.login1.Manager";
inline constexpr const char* kSystemd1 = "org.freedesktop.systemd1";
inline constexpr const char* kSystemd1Path = "/org/freedesktop/systemd1";
inline constexpr const char* kSystemd1Manager = "org.freedesktop.systemd1.Manager";

}  // namespace sandbox
