// softnic's user directory and what dead processes leave in it (issue 29
// items 2 and 11; softnic/user_dir.h, softnic/leftovers.h): names another
// user could have made first never deny softnic, the runtime directory is
// used when it is the user's own, and an attach sweeps the rdma_cm names
// of channels nobody holds; a SIGTERM removes the fabric file as an exit
// does.  Another user's squats, for real, are e2e.cross_user's.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "softnic/cm_wire.h"
#include "softnic/fabric.h"
#include "softnic/internal.h"

namespace rdmasan::softnic {
namespace {

std::string Uid() { return std::to_string(geteuid()); }

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string DirOf(const std::string& path) { return path.substr(0, path.rfind('/')); }

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// RDMASAN_SOFTNIC_DIR set to a fresh directory for the test.
class UserDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rdmasan-user-dir-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    setenv("RDMASAN_SOFTNIC_DIR", base_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("RDMASAN_SOFTNIC_DIR");
    EXPECT_EQ(system(("rm -rf '" + base_ + "'").c_str()), 0);
  }
  // The name the fabric file had before issue 29, predictable.
  std::string OldName(const std::string& name) const { return base_ + "/rdmasan-" + Uid() + "-" + name; }
  std::string Predictable() const { return base_ + "/rdmasan-" + Uid() + ".d"; }
  std::string base_;
};

TEST_F(UserDir, ADirectoryAtTheFabricsOldNameDoesNotDenySoftnic) {
  ASSERT_EQ(mkdir(OldName("d").c_str(), 0777), 0);
  Fabric* f = Fabric::Attach("d");
  ASSERT_NE(f, nullptr) << "a directory squatting the name denied softnic: " << strerror(errno);
  EXPECT_NE(f->path(), OldName("d"));
  f->Detach();
  delete f;
}

TEST_F(UserDir, FilesAndLinksAtTheOldNameAreNeverUsed) {
  const int fd = open(OldName("sq").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string target = base_ + "/victim";
  close(open(target.c_str(), O_CREAT | O_WRONLY, 0600));
  ASSERT_EQ(symlink(target.c_str(), OldName("ln").c_str()), 0);
  for (const char* name : {"sq", "ln"}) {
    Fabric* f = Fabric::Attach(name);
    ASSERT_NE(f, nullptr) << name << ": " << strerror(errno);
    EXPECT_EQ(DirOf(f->path()), Predictable());
    f->Detach();
    delete f;
  }
  struct stat st;
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the link's target was grown into a fabric";
}

TEST_F(UserDir, TakenUserDirectoryMovesToARandomNameEveryProcessFinds) {
  ASSERT_EQ(mkdir(Predictable().c_str(), 0755), 0);
  ASSERT_EQ(chmod(Predictable().c_str(), 0755), 0);  // open to others: as good as another user's
  ASSERT_EQ(mkdir(OldName("both").c_str(), 0777), 0);
  Fabric* f = Fabric::Attach("both");
  ASSERT_NE(f, nullptr) << "the name and the per-user directory taken denied softnic: " << strerror(errno);
  const std::string dir = DirOf(f->path());
  EXPECT_TRUE(StartsWith(dir, base_ + "/rdmasan-" + Uid() + ".")) << dir;
  EXPECT_NE(dir, Predictable());
  struct stat st;
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Another process of the user meets it there.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Fabric* g = Fabric::Attach("both");
    const std::string path = g ? g->path() : "none";
    if (write(fds[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) _exit(2);
    if (g) g->Detach();
    _exit(0);
  }
  close(fds[1]);
  char buf[4096] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), f->path()) << "another process of the user did not meet it";
  f->Detach();
  delete f;
  EXPECT_FALSE(Exists(dir + "/fabric-both")) << "the last one out removes the file";
}

TEST_F(UserDir, LinkAtTheUserDirectoryIsNotFollowed) {
  const std::string elsewhere = base_ + "/elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), Predictable().c_str()), 0);
  Fabric* f = Fabric::Attach("ln");
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_FALSE(StartsWith(f->path(), Predictable() + "/")) << f->path();
  EXPECT_FALSE(Exists(elsewhere + "/fabric-ln"));
  f->Detach();
  delete f;
}

// An inbox socket file at `path` whose socket is closed (its channel's
// process died), or, with `keep`, still bound: its fd.
int Inbox(const std::string& path, bool keep) {
  const int s = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
  if (keep) return s;
  close(s);
  return 0;
}

pid_t DeadPid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, nullptr, 0);
  return p;
}

TEST_F(UserDir, AttachSweepsTheRdmaCmNamesNobodyHolds) {
  std::string ud;
  ASSERT_TRUE(UserPrivateDir(&ud));
  // A folder a SIGKILLed channel left: its inbox (named with a pid that
  // runs again: this process's) and a port file nobody holds.
  const std::string gone = ud + "/cm-gone";
  ASSERT_EQ(mkdir(gone.c_str(), 0700), 0);
  ASSERT_EQ(Inbox(gone + "/" + std::to_string(getpid()) + ".0.00aa", false), 0);
  cm::PortRecord rec{};
  int fd = open((gone + "/p2-7471").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_EQ(write(fd, &rec, sizeof(rec)), static_cast<ssize_t>(sizeof(rec)));
  close(fd);
  // A live one: a bound inbox named with a pid that ended (a forked child
  // holds its parent's), and a held port file.
  const std::string live = ud + "/cm-live";
  ASSERT_EQ(mkdir(live.c_str(), 0700), 0);
  const std::string inbox = live + "/" + std::to_string(DeadPid()) + ".0.00bb";
  const int bound = Inbox(inbox, true);
  ASSERT_GT(bound, 0);
  const int held = open((live + "/p2-7472").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_EQ(write(held, &rec, sizeof(rec)), static_cast<ssize_t>(sizeof(rec)));
  ASSERT_EQ(flock(held, LOCK_EX), 0);

  Fabric* f = Fabric::Attach("sweep");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(Exists(gone)) << "the dead channel's folder is left behind";
  EXPECT_TRUE(Exists(inbox)) << "a bound inbox was removed";
  EXPECT_TRUE(Exists(live + "/p2-7472")) << "a held port file was removed";
  f->Detach();
  delete f;
  close(bound);
  close(held);
}

TEST_F(UserDir, SigtermRemovesTheFabricFileAsAnExitDoes) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Fabric* g = Fabric::Attach("term");
    const std::string path = g ? g->path() : "none";
    if (write(fds[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) _exit(2);
    close(fds[1]);
    for (;;) pause();
  }
  close(fds[1]);
  char buf[4096] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  const std::string path(buf, n > 0 ? n : 0);
  ASSERT_TRUE(Exists(path)) << path;
  kill(child, SIGTERM);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "the process must still die of SIGTERM";
  EXPECT_FALSE(Exists(path)) << "SIGTERM left the fabric file behind";
}

// XDG_RUNTIME_DIR set to a fresh private directory on tmpfs, and
// RDMASAN_SOFTNIC_DIR unset.
class RuntimeDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* s = getenv("RDMASAN_SOFTNIC_DIR")) saved_dir_ = s;
    if (const char* x = getenv("XDG_RUNTIME_DIR")) saved_xdg_ = x;
    unsetenv("RDMASAN_SOFTNIC_DIR");
    char tmpl[] = "/dev/shm/rdmasan-xdg-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    xdg_ = tmpl;
    setenv("XDG_RUNTIME_DIR", xdg_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_dir_.empty())
      unsetenv("RDMASAN_SOFTNIC_DIR");
    else
      setenv("RDMASAN_SOFTNIC_DIR", saved_dir_.c_str(), 1);
    if (saved_xdg_.empty())
      unsetenv("XDG_RUNTIME_DIR");
    else
      setenv("XDG_RUNTIME_DIR", saved_xdg_.c_str(), 1);
    EXPECT_EQ(system(("rm -rf '" + xdg_ + "'").c_str()), 0);
  }
  std::string xdg_, saved_dir_, saved_xdg_;
};

TEST_F(RuntimeDir, FabricLivesInTheUsersRuntimeDirectory) {
  const std::string name = "xdg-" + std::to_string(getpid());
  Fabric* f = Fabric::Attach(name);
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_EQ(f->path(), xdg_ + "/rdmasan/fabric-" + name);
  struct stat st;
  ASSERT_EQ(lstat((xdg_ + "/rdmasan").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  f->Detach();
  delete f;
}

TEST_F(RuntimeDir, ARuntimeDirectoryOthersCanReachIsIgnored) {
  ASSERT_EQ(chmod(xdg_.c_str(), 0755), 0);
  Fabric* f = Fabric::Attach("xdg-open-" + std::to_string(getpid()));
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_FALSE(StartsWith(f->path(), xdg_ + "/")) << f->path();
  f->Detach();
  delete f;
}

// sudo -E: the variable names another user's runtime directory.
TEST_F(RuntimeDir, AnotherUsersRuntimeDirectoryIsIgnored) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  ASSERT_EQ(chown(xdg_.c_str(), 65534, 65534), 0);
  Fabric* f = Fabric::Attach("xdg-other-" + std::to_string(getpid()));
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_FALSE(StartsWith(f->path(), xdg_ + "/")) << f->path();
  f->Detach();
  delete f;
}

}  // namespace
}  // namespace rdmasan::softnic
