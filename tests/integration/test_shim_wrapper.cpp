// Wrapper mode: the shim starts the target as its child and exits with the child's exit code.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

class ShimWrapper : public ShimTest {
 protected:
  shim_options wrapping(const std::vector<std::string>& command, std::string drain = "1s") {
    shim_options o;
    o.drain_delay = std::move(drain);
    o.exit_timeout = "5s";
    o.wrapped_command = command;
    return o;
  }
};

TEST_F(ShimWrapper, ChildExitCodeIsTheShimsExitCode) {
  auto s = start_shim(wrapping({"/bin/sh", "-c", "exit 3"}), /*wait_ready=*/false);
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "the shim did not exit after its child did";
  EXPECT_EQ(sandbox::shell_exit_code(*status), 3) << sandbox::describe_wait_status(*status);
}

TEST_F(ShimWrapper, SigtermIsForwardedOnceAndAChildExitingZeroGivesZero) {
  auto api = describe_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(wrapping(api.argv));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_apiserver_listening(api));

  s.process->signal(SIGTERM);
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0) << sandbox::describe_wait_status(*status);
  auto signals = api.signals();
  ASSERT_EQ(signals.size(), 1u) << "the child must get exactly one signal";
  EXPECT_EQ(signals[0].word, "SIGTERM");
  auto exit = api.lifecycle();
  ASSERT_FALSE(exit.empty());
  EXPECT_EQ(exit.back().word, "EXIT");
  EXPECT_EQ(exit.back().detail, "0");
}

TEST_F(ShimWrapper, RebootWithAChildExitingZeroGivesZero) {
  auto api = describe_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(wrapping(api.argv, "2s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_apiserver_listening(api));
  ASSERT_TRUE(wait_shim_lock(true));

  sandbox::http_prober prober(s.port);
  auto r = reboot_and_observe(api, prober);
  report(r);
  ASSERT_TRUE(r.start);
  EXPECT_GE(r.start->usec - r.reboot_us, 2'000'000u);
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status) << "the shim did not exit after its child did";
  EXPECT_EQ(sandbox::shell_exit_code(*status), 0) << sandbox::describe_wait_status(*status);
  EXPECT_EQ(api.signals().size(), 1u);
}

TEST_F(ShimWrapper, ChildKilledBySigkillGives137) {
  auto api = describe_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(wrapping(api.argv));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_apiserver_listening(api));
  auto pid = api.pid();
  ASSERT_TRUE(pid);
  ASSERT_NE(*pid, s.process->pid());
  ::kill(*pid, SIGKILL);  // the shim's child: started (indirectly) by this test
  auto status = s.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 137) << sandbox::describe_wait_status(*status);
}

}  // namespace
}  // namespace shim_it
