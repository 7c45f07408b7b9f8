#include "core/sequence_runner.hpp"

namespace shim {

void sequence_runner::feed(input next) {
  if (halted_) return;
  queued_.push_back(std::move(next));
  if (running_) return;  // the loop below, further up the stack, takes it in turn
  running_ = true;
  struct reset {
    bool& flag;
    ~reset() { flag = false; }
  } guard{running_};
  while (!queued_.empty() && !halted_) {
    const input current = std::move(queued_.front());
    queued_.pop_front();
    for (const auto& action : current(sequence_)) {
      if (halted_) break;
      handlers_.carry_out(action);
    }
  }
  queued_.clear();
  if (!halted_ && handlers_.settled) handlers_.settled();
}

}  // namespace shim
