// The dispatch tables (interpose/dispatch.h): which table a context, a
// device or a command fd gets; softnic's table complete but for what it
// states it lacks; the real table's answers while libibverbs lacks a
// function, and its lookup once the process loaded libibverbs.
#include "interpose/dispatch.h"

#include <dlfcn.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <set>
#include <string>

#include "interpose/loader.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::interpose {
namespace {

TEST(DispatchTable, TableOfTellsSoftnicFromReal) {
  ibv_context* ctx = testing::OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(&TableOf(ctx), &SoftnicTable());
  EXPECT_EQ(&TableOf(ctx->device), &SoftnicTable());
  EXPECT_EQ(&TableOfCommandFd(ctx->cmd_fd), &SoftnicTable());

  ibv_device other_device{};
  ibv_context other{};
  other.device = &other_device;
  EXPECT_EQ(&TableOf(&other), &RealTable());
  EXPECT_EQ(&TableOf(&other_device), &RealTable());
  EXPECT_EQ(&TableOf(static_cast<const ibv_context*>(nullptr)), &RealTable()) << "a port event's";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_EQ(&TableOfCommandFd(fds[0]), &RealTable());
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Every entry of softnic's table is a function of softnic's, except those
// dispatch.h names as missing, which give the real table's missing answer.
TEST(DispatchTable, SoftnicTableIsCompleteButForWhatItStates) {
  const std::set<std::string> lacks = {"reg_dmabuf_mr", "query_ece", "set_ece"};
  const DispatchTable& t = SoftnicTable();
#define RDMASAN_DISPATCH(entry, Ret, Params, symbol, version, softnic, real, missing) \
  EXPECT_EQ(t.entry.Find() == nullptr, lacks.count(#entry) == 1) << #entry << " of softnic's table";
#include "interpose/dispatch.inc"
#undef RDMASAN_DISPATCH
  EXPECT_TRUE(t.cq_is_cq_ex);
  EXPECT_TRUE(t.keeps_destroyed_qps);
  EXPECT_FALSE(RealTable().cq_is_cq_ex);
  EXPECT_FALSE(RealTable().keeps_destroyed_qps);
}

// What softnic lacks answers as a real provider without the function does.
TEST(DispatchTable, SoftnicsMissingEntriesAnswerAsBefore) {
  ibv_context* ctx = testing::OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Without libibverbs in the process (unit tests do not link it), a verb on
// a context that is not softnic's gets the answer the shim always gave.
TEST(DispatchTable, RealTableWithoutLibibverbsAnswersAsBefore) {
  if (LoadedVerbs()) GTEST_SKIP() << "libibverbs is loaded in this process";
  ibv_device device{};
  ibv_context ctx{};
  ctx.device = &device;
  errno = 0;
  EXPECT_EQ(ibv_alloc_pd(&ctx), nullptr);
  EXPECT_EQ(errno, ENOSYS);
  ibv_device_attr attr;
  EXPECT_EQ(ibv_query_device(&ctx, &attr), ENOSYS);
  ibv_gid gid;
  EXPECT_EQ(ibv_query_gid(&ctx, 1, 0, &gid), -1);
  ibv_gid_entry entries[1];
  EXPECT_EQ(_ibv_query_gid_table(&ctx, entries, 1, 0, sizeof(entries[0])), -ENOSYS);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(&ctx, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_get_device_name(&device), nullptr);
  EXPECT_EQ(ibv_get_device_index(&device), -1);
  ibv_pd pd{};
  pd.context = &ctx;
  ibv_mr mr{};
  mr.context = &ctx;
  EXPECT_EQ(ibv_rereg_mr(&mr, IBV_REREG_MR_CHANGE_ACCESS, &pd, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  ibv_qp qp{};
  qp.context = &ctx;
  ibv_ece ece{};
  EXPECT_EQ(ibv_query_ece(&qp, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_query_qp_data_in_order(&qp, IBV_WR_SEND, 0), 0);
  // Not a character device: libibverbs' own answer, without asking it.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(fds[0]), nullptr);
  EXPECT_EQ(errno, EINVAL);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(RealTable().alloc_pd.Find(), nullptr);
}

// A real entry not found is looked up again once the process loaded
// something; found, the entry holds libibverbs' function.
TEST(DispatchTable, RealEntryIsFoundOnceLibibverbsIsLoaded) {
  if (LoadedVerbs()) GTEST_SKIP() << "libibverbs is loaded in this process";
  ibv_device device{};
  snprintf(device.name, sizeof(device.name), "not-softnic");
  EXPECT_EQ(ibv_get_device_name(&device), nullptr) << "no libibverbs yet";
  EXPECT_EQ(RealTable().get_device_name.Find(), nullptr);
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "libibverbs.so.1 not installed: " << dlerror();
  // libibverbs' ibv_get_device_name reads the device's name, nothing else.
  EXPECT_STREQ(ibv_get_device_name(&device), "not-softnic");
  EXPECT_EQ(reinterpret_cast<void*>(RealTable().get_device_name.Find()),
            dlvsym(h, "ibv_get_device_name", "IBVERBS_1.1"));
  dlclose(h);
}

// Each entry's symbol and version name a function of the installed
// libibverbs (the adapters find theirs themselves).
TEST(DispatchTable, EveryRealEntryNamesALibibverbsFunction) {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "libibverbs.so.1 not installed: " << dlerror();
  const DispatchTable& t = RealTable();
  auto in_libibverbs = [h](const char* symbol, const char* version) {
    return version ? dlvsym(h, symbol, version) : dlsym(h, symbol);
  };
#define RDMASAN_DISPATCH(entry, Ret, Params, symbol, version, softnic, real, missing)              \
  EXPECT_NE(in_libibverbs(#symbol, version), nullptr) << #symbol;                                  \
  if (std::string(#real) == "nullptr")                                                             \
    EXPECT_EQ(reinterpret_cast<void*>(t.entry.Find()), in_libibverbs(#symbol, version)) << #entry; \
  else                                                                                             \
    EXPECT_NE(t.entry.Find(), nullptr) << #entry;
#include "interpose/dispatch.inc"
#undef RDMASAN_DISPATCH
  dlclose(h);
}

}  // namespace
}  // namespace rdmasan::interpose
