// core/file: the files rdmasan writes are created fresh (0600) or are
// files of ours; what it reads is a regular file of bounded size (issue 29
// items 1 and 9).  A file of another user needs root to make (chown); the
// end-to-end version with two real users is e2e.cross_user_reports.
#include "core/file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace rdmasan::core {
namespace {

std::string Dir() {
  char tmpl[] = "/tmp/rdmasan_file_test.XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Put(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

TEST(CreateForWrite, NewFilesAre0600) {
  const std::string d = Dir();
  for (CreateMode m : {CreateMode::kFresh, CreateMode::kAppend, CreateMode::kTruncate}) {
    const std::string p = d + "/f" + std::to_string(static_cast<int>(m));
    const int fd = CreateForWrite(p, m);
    ASSERT_GE(fd, 0) << p;
    close(fd);
    struct stat st;
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << p;
  }
}

TEST(CreateForWrite, OwnFileIsAppendedToAndReplaced) {
  const std::string d = Dir();
  Put(d + "/log", "one\n", 0644);
  int fd = CreateForWrite(d + "/log", CreateMode::kAppend);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "two\n", 4), 4);
  close(fd);
  EXPECT_EQ(Slurp(d + "/log"), "one\ntwo\n");
  fd = CreateForWrite(d + "/log", CreateMode::kTruncate);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(Slurp(d + "/log"), "");
}

// A file others may write could be rewritten under us (or was planted):
// neither appended to nor truncated, and the reason says what to do.
TEST(CreateForWrite, FileOthersCanWriteIsRefusedUntouched) {
  const std::string d = Dir();
  Put(d + "/log", "theirs\n", 0666);
  for (CreateMode m : {CreateMode::kAppend, CreateMode::kTruncate}) {
    std::string why;
    EXPECT_EQ(CreateForWrite(d + "/log", m, 0600, &why), -1);
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(why.find("mode 0666"), std::string::npos) << why;
  }
  EXPECT_EQ(Slurp(d + "/log"), "theirs\n");
}

TEST(CreateForWrite, HardLinkedFileIsRefused) {
  const std::string d = Dir();
  Put(d + "/precious", "precious\n", 0600);
  ASSERT_EQ(link((d + "/precious").c_str(), (d + "/log").c_str()), 0);
  std::string why;
  EXPECT_EQ(CreateForWrite(d + "/log", CreateMode::kTruncate, 0600, &why), -1);
  EXPECT_NE(why.find("2 hard links"), std::string::npos) << why;
  EXPECT_EQ(Slurp(d + "/precious"), "precious\n");
}

TEST(CreateForWrite, FifoAndFolderAreRefusedWithoutWaiting) {
  const std::string d = Dir();
  ASSERT_EQ(mkfifo((d + "/fifo").c_str(), 0600), 0);
  ASSERT_EQ(mkdir((d + "/dir").c_str(), 0700), 0);
  for (CreateMode m : {CreateMode::kFresh, CreateMode::kAppend, CreateMode::kTruncate}) {
    std::string why;
    EXPECT_EQ(CreateForWrite(d + "/fifo", m, 0600, &why), -1);  // returns: never blocks
    EXPECT_NE(why.find("FIFO"), std::string::npos) << static_cast<int>(m) << ": " << why;
    why.clear();
    EXPECT_EQ(CreateForWrite(d + "/dir", m, 0600, &why), -1);
    EXPECT_FALSE(why.empty());
  }
}

TEST(CreateForWrite, FileOfAnotherUserIsRefusedUntouched) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a file of another user (e2e.cross_user_reports)";
  const std::string d = Dir();
  Put(d + "/log", "theirs\n", 0600);
  ASSERT_EQ(chown((d + "/log").c_str(), 4242, 4242), 0);
  for (CreateMode m : {CreateMode::kFresh, CreateMode::kAppend, CreateMode::kTruncate}) {
    std::string why;
    EXPECT_EQ(CreateForWrite(d + "/log", m, 0600, &why), -1);
    EXPECT_NE(why.find("owned by uid 4242"), std::string::npos) << why;
  }
  EXPECT_EQ(Slurp(d + "/log"), "theirs\n");
  EXPECT_NE(CheckWritable(d + "/log"), "");
  EXPECT_EQ(CheckWritable(d + "/absent"), "");
}

TEST(ReadInputFile, RegularFileIsRead) {
  const std::string d = Dir();
  Put(d + "/supp", "rule\n", 0644);
  std::string text;
  EXPECT_EQ(ReadInputFile(d + "/supp", &text), "");
  EXPECT_EQ(text, "rule\n");
}

TEST(ReadInputFile, FolderFifoAndDeviceAreErrors) {
  const std::string d = Dir();
  ASSERT_EQ(mkfifo((d + "/fifo").c_str(), 0600), 0);
  std::string text;
  EXPECT_NE(ReadInputFile(d, &text).find("a directory"), std::string::npos);
  EXPECT_NE(ReadInputFile(d + "/fifo", &text).find("a FIFO"), std::string::npos);  // never blocks
  EXPECT_NE(ReadInputFile("/dev/zero", &text).find("character device"), std::string::npos);
  EXPECT_NE(ReadInputFile(d + "/absent", &text).find("No such file"), std::string::npos);
}

TEST(ReadInputFile, SizeIsBounded) {
  const std::string d = Dir();
  Put(d + "/big", std::string(100, 'x'), 0644);
  std::string text;
  EXPECT_NE(ReadInputFile(d + "/big", &text, 99).find("larger than"), std::string::npos);
  EXPECT_TRUE(text.empty());
  EXPECT_EQ(ReadInputFile(d + "/big", &text, 100), "");
}

}  // namespace
}  // namespace rdmasan::core
