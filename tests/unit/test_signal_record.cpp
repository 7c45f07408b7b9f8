// signal_record: what a restarted shim knows about the signals an earlier run sent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "process/signal_record.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "signal-record-test.XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() { fs::remove_all(path); }
};

TEST(ProcessIdentity, NamesThisProcessWithItsStartTime) {
  const auto self = identify_process(::getpid());
  ASSERT_TRUE(self);
  EXPECT_EQ(self->pid, ::getpid());
  EXPECT_GT(self->start_time, 0u);
  EXPECT_EQ(identify_process(::getpid()), self) << "stable for the life of the process";
}

TEST(ProcessIdentity, ParentStartedNoLaterThanUs) {
  const auto self = identify_process(::getpid());
  const auto parent = identify_process(::getppid());
  ASSERT_TRUE(self && parent);
  EXPECT_LE(parent->start_time, self->start_time);
}

TEST(ProcessIdentity, AGoneProcessHasNone) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(identify_process(child));
}

// comm may hold ") " and spaces: the fields are counted from the last ')'.
TEST(ProcessIdentity, ReadsTheStartTimeAfterAHostileComm) {
  temp_dir proc;
  fs::create_directories(proc.path / "4242");
  std::ofstream(proc.path / "4242" / "stat")
      << "4242 (evil) 1 2 3 (x) S) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
         "987654 1000 100 18446744073709551615\n";
  const auto id = identify_process(4242, proc.path.string());
  ASSERT_TRUE(id);
  EXPECT_EQ(id->start_time, 987654u);
}

TEST(ProcessIdentity, AZombieHasNone) {
  temp_dir proc;
  fs::create_directories(proc.path / "7");
  std::ofstream(proc.path / "7" / "stat")
      << "7 (kube-apiserver) Z 1 7 7 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5555 0 0\n";
  EXPECT_FALSE(identify_process(7, proc.path.string()));
}

TEST(SignalRecord, NoFileIsAnEmptyRecord) {
  temp_dir dir;
  const signal_record record(dir.path);
  const auto loaded = record.load();
  ASSERT_TRUE(loaded) << loaded.error();
  EXPECT_FALSE(loaded.value().unready_us);
  EXPECT_TRUE(loaded.value().signalled.empty());
}

TEST(SignalRecord, KeepsWhatWasSignalledAcrossARestart) {
  temp_dir dir;
  const auto self = identify_process(::getpid());
  ASSERT_TRUE(self);
  shutdown_record written;
  written.unready_us = 123456789;
  written.cause = "PrepareForShutdown(true) from :1.3";
  written.signalled.push_back({*self, 123456999, 15});
  ASSERT_TRUE(signal_record(dir.path).save(written));

  const auto loaded = signal_record(dir.path).load();
  ASSERT_TRUE(loaded) << loaded.error();
  const auto& r = loaded.value();
  EXPECT_EQ(r.unready_us, 123456789);
  EXPECT_EQ(r.cause, written.cause);
  ASSERT_EQ(r.signalled.size(), 1u);
  EXPECT_EQ(r.signalled[0].process, *self);
  EXPECT_EQ(r.signalled[0].signalled_us, 123456999);
  EXPECT_EQ(r.signalled[0].signal, 15);
  EXPECT_TRUE(r.was_signalled(*self));
  EXPECT_FALSE(r.was_signalled({self->pid, self->start_time + 1})) << "a reused PID";
}

// Issue 19: a process left to kubelet stays one after a restart, apart from the ones the shim
// signalled; once the shim has sent its own (kubelet's lock went first) it is the shim's.
TEST(SignalRecord, KeepsWhoSendsTheSignal) {
  temp_dir dir;
  const auto self = identify_process(::getpid());
  const auto parent = identify_process(::getppid());
  ASSERT_TRUE(self && parent);
  shutdown_record written;
  written.unready_us = 5;
  written.signalled.push_back({*self, 7, 15, /*left_to_kubelet=*/true});
  written.signalled.push_back({*parent, 8, 15, /*left_to_kubelet=*/false});
  ASSERT_TRUE(signal_record(dir.path).save(written));
  auto loaded = signal_record(dir.path).load();
  ASSERT_TRUE(loaded) << loaded.error();
  auto r = loaded.value();
  ASSERT_EQ(r.signalled.size(), 2u);
  EXPECT_TRUE(r.was_signalled(*self));
  ASSERT_TRUE(r.find(*self));
  EXPECT_TRUE(r.find(*self)->left_to_kubelet);
  EXPECT_FALSE(r.find(*parent)->left_to_kubelet);
  EXPECT_FALSE(r.find({self->pid, self->start_time + 1}));

  r.find(*self)->left_to_kubelet = false;
  ASSERT_TRUE(signal_record(dir.path).save(r));
  loaded = signal_record(dir.path).load();
  ASSERT_TRUE(loaded);
  r = loaded.value();
  ASSERT_TRUE(r.find(*self));
  EXPECT_FALSE(r.find(*self)->left_to_kubelet);
}

TEST(SignalRecord, LeavesOutProcessesThatHaveExited) {
  temp_dir dir;
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  const auto id = identify_process(child);
  ASSERT_TRUE(id);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  shutdown_record written;
  written.signalled.push_back({*id, 1, 15});
  ASSERT_TRUE(signal_record(dir.path).save(written));
  const auto loaded = signal_record(dir.path).load();
  ASSERT_TRUE(loaded);
  EXPECT_TRUE(loaded.value().signalled.empty());
}

TEST(SignalRecord, ARecordOfAnotherBootIsVoid) {
  temp_dir dir;
  std::ofstream(dir.path / "signalled") << "shutdown-shim signal record 1\n"
                                        << "boot_id=00000000000000000000000000000000\n"
                                        << "unready_us=5\ncause=x\n";
  const auto loaded = signal_record(dir.path).load();
  ASSERT_TRUE(loaded);
  EXPECT_FALSE(loaded.value().unready_us);
}

TEST(SignalRecord, AMalformedRecordIsAnError) {
  temp_dir dir;
  for (const char* text : {"not a record\n", "shutdown-shim signal record 1\nsignalled=1 2\n",
                           "shutdown-shim signal record 1\nleft_to_kubelet=1 2 3\n",
                           "shutdown-shim signal record 1\nunready_us=soon\n",
                           "shutdown-shim signal record 1\nwhatever=1\n"}) {
    std::ofstream(dir.path / "signalled") << text;
    EXPECT_FALSE(signal_record(dir.path).load()) << text;
  }
}

// Others who may write the directory could make root skip a signal, or hold a reboot.
TEST(SignalRecord, ADirectoryOthersMayWriteIsNotTrusted) {
  temp_dir dir;
  ASSERT_TRUE(signal_record(dir.path).save({}));
  ::chmod(dir.path.c_str(), 0777);
  const auto loaded = signal_record(dir.path).load();
  ASSERT_FALSE(loaded);
  EXPECT_NE(loaded.error().find("writable by group or others"), std::string::npos);
}

TEST(SignalRecord, CreatesItsDirectory) {
  temp_dir dir;
  const signal_record record(dir.path / "run" / "shutdown-shim");
  ASSERT_TRUE(record.save({}));
  EXPECT_TRUE(fs::exists(record.file()));
}

TEST(SignalRecord, DisabledKeepsNothing) {
  const signal_record record{fs::path()};
  EXPECT_FALSE(record.enabled());
  EXPECT_TRUE(record.save({}));
  EXPECT_TRUE(record.load());
}

}  // namespace
}  // namespace shim
