// interpose/loader: the shim's own dlsym/dlvsym (read from libc, not looked
// up) and the real libibverbs found when it was loaded RTLD_LOCAL after
// the first, failed, lookup (issue 14).  Unit-test binaries do not link
// libibverbs, so this process starts without one.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "interpose/loader.h"

namespace rdmasan::interpose {
namespace {

const char* Owner(void* p) {
  Dl_info di;
  return p && dladdr(p, &di) && di.dli_fname ? di.dli_fname : "";
}

TEST(Loader, NextDlsymIsLibcs) {
  ASSERT_NE(NextDlsym(), nullptr);
  ASSERT_NE(NextDlvsym(), nullptr);
  EXPECT_NE(std::strstr(Owner(reinterpret_cast<void*>(NextDlsym())), "libc.so"), nullptr);
  EXPECT_NE(std::strstr(Owner(reinterpret_cast<void*>(NextDlvsym())), "libc.so"), nullptr);
  void* libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
  ASSERT_NE(libc, nullptr);
  EXPECT_EQ(NextDlsym()(libc, "malloc"), dlsym(libc, "malloc"));
  dlclose(libc);
}

TEST(Loader, RealSymFindsALibibverbsLoadedLocallyAfterAFailedLookup) {
  static constinit RealSym fork_init("ibv_fork_init", "IBVERBS_1.1");
  const bool loaded_before = LoadedVerbs() != nullptr;
  if (!loaded_before) {
    EXPECT_EQ(fork_init.Get(), nullptr) << "no libibverbs in this process yet";
  }
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "libibverbs.so.1 not installed: " << dlerror();
  void* f = fork_init.Get();
  ASSERT_NE(f, nullptr) << "the failed lookup was kept";
  EXPECT_NE(std::strstr(Owner(f), "libibverbs.so"), nullptr) << Owner(f);
  EXPECT_EQ(f, dlvsym(h, "ibv_fork_init", "IBVERBS_1.1"));
  EXPECT_EQ(LoadedVerbs(), h) << "dlopen of a loaded library returns its handle";
  // The default version when the version asked for does not exist.
  EXPECT_EQ(Real("ibv_fork_init", "NO_SUCH_VERSION"), f);
  EXPECT_EQ(Real("ibv_fork_init", nullptr), f);
  EXPECT_EQ(Real("no_such_verb", "IBVERBS_1.1"), nullptr);
  dlclose(h);
}

// The way every hook reaches the libc function it wraps: the same
// function RTLD_NEXT names from here, kept; a name libc lacks stays null.
TEST(Loader, NextSymIsTheNextDefinitionAndKeepsItsAnswer) {
  static constinit NextSym<pid_t (*)()> next_getpid("getpid");
  static constinit NextSym<void (*)()> missing("rdmasan_no_such_libc_function");
  EXPECT_EQ(next_getpid.Cached(), nullptr) << "nothing looked up before the first call";
  ASSERT_NE(next_getpid.Get(), nullptr);
  EXPECT_EQ(reinterpret_cast<void*>(next_getpid.Get()), dlsym(RTLD_NEXT, "getpid"));
  EXPECT_EQ(reinterpret_cast<void*>(next_getpid.Cached()), NextFunction("getpid"));
  EXPECT_EQ(next_getpid(), getpid());
  EXPECT_FALSE(missing);
  EXPECT_EQ(missing.Cached(), nullptr);
}

TEST(Loader, IsVerbsLibraryLooksAtTheBaseName) {
  EXPECT_TRUE(IsVerbsLibrary("/usr/lib/x86_64-linux-gnu/libibverbs.so.1"));
  EXPECT_TRUE(IsVerbsLibrary("libibverbs.so.1.14.44.0"));
  EXPECT_FALSE(IsVerbsLibrary("/opt/libibverbs.so.d/librdmasan.so"));
  EXPECT_FALSE(IsVerbsLibrary(nullptr));
}

}  // namespace
}  // namespace rdmasan::interpose
