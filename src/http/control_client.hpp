#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace shim {

// What the control socket answered.
struct control_answer {
  unsigned status = 0;  // the HTTP status code
  std::string body;
};

struct control_client_limits {
  // The whole exchange: connect, request, answer.
  std::chrono::milliseconds timeout{5000};
  // The answer's body at most; its head at most kMaxControlAnswerHead (control_client.cpp).
  std::size_t max_answer_bytes = 1024 * 1024;
};

// One request to the control socket at `socket_path` (`method` such as "GET" or "POST", `target`
// such as "/status"; no body), in HTTP/1.1 with Connection: close. Blocks the calling thread for
// up to limits.timeout: for the CLI only, never on the shim's loop. Any complete answer is a
// success, whatever its status (403 "root only" too); the failure is one line naming the socket,
// with the errno where a system call failed (is_no_daemon reads it). Only root's shim is heard: a
// socket file not owned by root, or a listener whose uid is not 0, is refused (errno 0) before a
// byte of its answer is read.
result<control_answer> control_request(const std::filesystem::path& socket_path,
                                       std::string_view method, std::string_view target,
                                       control_client_limits limits = {});

// Whether a control_request() failure says that no shim listens there (no socket file, or a stale
// one: ENOENT, ECONNREFUSED), the CLI's "no daemon".
bool is_no_daemon(const result<control_answer>& failed);

}  // namespace shim
