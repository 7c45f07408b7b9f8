#pragma once

#include <deque>
#include <functional>

#include "core/shutdown_sequence.hpp"

namespace shim {

// The one way into shutdown_sequence: inputs are fed one at a time and each action is handed to
// the edges. An input that arrives while actions are being carried out (an edge that answers at
// once, a target found while the actions are applied) waits in a queue until the current batch is
// done, so the machine is never re-entered and no stale action of an earlier batch runs after a
// later one. Once halted (the shim is finishing), nothing more is carried out.
class sequence_runner {
 public:
  using input = std::function<shutdown_sequence::actions(shutdown_sequence&)>;
  struct handlers {
    std::function<void(const shutdown_sequence::action&)> carry_out;
    // The queue is empty again: the state is settled (for the status the shim shows).
    std::function<void()> settled;
  };

  sequence_runner(shutdown_sequence::settings settings, handlers h)
      : sequence_(settings), handlers_(std::move(h)) {}
  sequence_runner(const sequence_runner&) = delete;
  sequence_runner& operator=(const sequence_runner&) = delete;

  void feed(input next);
  void halt() { halted_ = true; }

  const shutdown_sequence& sequence() const { return sequence_; }

 private:
  shutdown_sequence sequence_;
  handlers handlers_;
  std::deque<input> queued_;
  bool running_ = false;
  bool halted_ = false;
};

}  // namespace shim
