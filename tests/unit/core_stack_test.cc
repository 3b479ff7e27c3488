#include "core/stack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rdmasan::core {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The callers below keep frame pointers so the walk past frame #0 is
// testable whatever the build type.
#if defined(__clang__)
#define KEEP_FP
#else
#define KEEP_FP __attribute__((optimize("no-omit-frame-pointer")))
#endif

// Captures at a known line; the asm keeps the call from being a tail call.
__attribute__((noinline)) KEEP_FP StackId CaptureHere(int* line) {
  *line = __LINE__ + 1;  // the next line
  StackId id = CaptureStack();
  asm volatile("" ::: "memory");
  return id;
}

// An exported-entry-point stand-in: the stack starts at its caller.
__attribute__((noinline)) StackId EntryPoint() {
  StackId id = RDMASAN_CAPTURE_CALLER_STACK();
  asm volatile("" ::: "memory");
  return id;
}

__attribute__((always_inline)) inline StackId InlinedCapture(int* line) {
  *line = __LINE__ + 1;  // the next line
  StackId id = CaptureStack();
  return id;
}

__attribute__((noinline)) StackId OuterOfInlined(int* inner_line, int* call_line) {
  *call_line = __LINE__ + 1;  // the next line
  StackId id = InlinedCapture(inner_line);
  asm volatile("" ::: "memory");
  return id;
}

__attribute__((noinline)) KEEP_FP StackId ViaA(int* line, int* here) {
  *line = __LINE__ + 1;  // the next line
  StackId id = CaptureHere(here);
  asm volatile("" ::: "memory");
  return id;
}

__attribute__((noinline)) KEEP_FP StackId ViaB(int* line, int* here) {
  *line = __LINE__ + 1;  // the next line
  StackId id = CaptureHere(here);
  asm volatile("" ::: "memory");
  return id;
}

// Two call sites in one function (the volatile stores keep the compiler
// from merging them).
volatile int g_sink;
__attribute__((noinline)) StackId TwoSites(bool second) {
  StackId id;
  if (second) {
    g_sink = 1;
    id = CaptureStack();
    g_sink = 2;
  } else {
    g_sink = 3;
    id = CaptureStack();
    g_sink = 4;
  }
  return id;
}

TEST(Stack, FrameZeroIsTheCallSite) {
  int line = 0;
  StackId id = CaptureHere(&line);
  ASSERT_NE(id, 0u);
  std::vector<uintptr_t> pcs = StackPcs(id);
  ASSERT_FALSE(pcs.empty());
  std::vector<Frame> frames = SymbolizeStack(id);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames[0].pc, pcs[0]);
  EXPECT_TRUE(EndsWith(frames[0].file, "core_stack_test.cc")) << frames[0].file;
  EXPECT_EQ(frames[0].line, line);
  EXPECT_NE(frames[0].function.find("CaptureHere"), std::string::npos) << frames[0].function;
  EXPECT_FALSE(frames[0].module.empty());
  std::string text = FormatFrame(frames[0]);
  EXPECT_NE(text.find(" in "), std::string::npos) << text;
  EXPECT_NE(text.find("core_stack_test.cc:" + std::to_string(line)), std::string::npos) << text;
}

TEST(Stack, CallerStackStartsAtTheCallerOfTheEntryPoint) {
  int line = __LINE__ + 1;  // the next line
  StackId id = EntryPoint();
  std::vector<Frame> frames = SymbolizeStack(id);
  ASSERT_FALSE(frames.empty());
  EXPECT_TRUE(EndsWith(frames[0].file, "core_stack_test.cc")) << frames[0].file;
  EXPECT_EQ(frames[0].line, line);
  EXPECT_EQ(frames[0].function.find("EntryPoint()"), std::string::npos) << frames[0].function;
}

TEST(Stack, InlinedCallsExpandToFrames) {
  int inner = 0, call = 0;
  StackId id = OuterOfInlined(&inner, &call);
  std::vector<Frame> frames = SymbolizeStack(id);
  ASSERT_GE(frames.size(), 2u);
  EXPECT_NE(frames[0].function.find("InlinedCapture"), std::string::npos) << frames[0].function;
  EXPECT_EQ(frames[0].line, inner);
  EXPECT_NE(frames[1].function.find("OuterOfInlined"), std::string::npos) << frames[1].function;
  EXPECT_EQ(frames[1].line, call);
  EXPECT_EQ(frames[0].pc, frames[1].pc);
}

TEST(Stack, SameCallSiteSameIdDifferentSiteDifferentId) {
  int n = 3;
  asm volatile("" : "+r"(n));  // an opaque count: the loop stays one call site
  int line = 0;
  std::vector<StackId> ids, first, second;
  for (int i = 0; i < n && i < 3; ++i) {
    ids.push_back(CaptureHere(&line));
    first.push_back(TwoSites(false));
    second.push_back(TwoSites(true));
  }
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[1], ids[2]);
  EXPECT_EQ(first[0], first[1]);
  EXPECT_EQ(second[0], second[1]);
  EXPECT_NE(first[0], second[0]);
  EXPECT_NE(StackPcs(first[0])[0], StackPcs(second[0])[0]) << "frame #0 tells the two sites apart";
}

TEST(Stack, WalksFramePointersPastFrameZero) {
  int line_a = 0, line_b = 0, here = 0;
  StackId a[2];
  int n = 2;
  asm volatile("" : "+r"(n));  // an opaque count: the loop stays one call site
  for (int i = 0; i < n && i < 2; ++i) a[i] = ViaA(&line_a, &here);
  StackId b = ViaB(&line_b, &here);
  EXPECT_EQ(a[0], a[1]);
  EXPECT_NE(a[0], b) << "same frame #0, different callers";
  std::vector<Frame> frames = SymbolizeStack(a[0]);
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(frames[0].line, here);
  EXPECT_NE(frames[1].function.find("ViaA"), std::string::npos) << frames[1].function;
  EXPECT_EQ(frames[1].line, line_a);
}

// A frame-pointer chain that is no chain (what rbp holds in a program built
// without frame pointers): the walk must stop at the first word that is
// not a return address, not report it as a frame.
TEST(Stack, WalkStopsWhereTheChainIsNoChain) {
  int line = 0;
  uintptr_t pc = StackPcs(CaptureHere(&line))[0];               // a real return address
  const uintptr_t data = reinterpret_cast<uintptr_t>(&g_sink);  // mapped, but no code
  for (uintptr_t garbage : {uintptr_t{0x100000000}, uintptr_t{0x7fff00001000}, data}) {
    volatile uintptr_t fake[4];
    fake[0] = reinterpret_cast<uintptr_t>(&fake[2]);  // a "caller's frame" above
    fake[1] = 0;
    fake[2] = 0;
    fake[3] = garbage;  // its "return address"
    StackId id = CaptureStackFrom(pc, reinterpret_cast<uintptr_t>(&fake[0]));
    EXPECT_EQ(StackPcs(id), std::vector<uintptr_t>{pc}) << std::hex << garbage;
    std::vector<Frame> frames = SymbolizeStack(id);
    for (const Frame& f : frames) EXPECT_EQ(FormatFrame(f).find("<unknown>"), std::string::npos);
  }
}

// The same call site and frame, a caller's return address changed below
// them (another caller at the same depth): the capture remembered for that
// call site and frame must not be given again, nor after the change back.
TEST(Stack, SameSiteAndFrameDifferentCallerIsAnotherStack) {
  int line = 0;
  uintptr_t pc = StackPcs(CaptureHere(&line))[0];
  const uintptr_t first = StackPcs(TwoSites(false))[0], second = StackPcs(TwoSites(true))[0];
  ASSERT_NE(first, second);
  volatile uintptr_t fake[6];
  fake[0] = reinterpret_cast<uintptr_t>(&fake[2]);  // the caller's frame record
  fake[1] = pc;
  fake[2] = 0;  // the chain ends there
  const uintptr_t frame = reinterpret_cast<uintptr_t>(&fake[0]);
  for (int round = 0; round < 2; ++round) {
    for (uintptr_t caller : {first, second}) {
      fake[3] = caller;  // its return address
      for (int again = 0; again < 2; ++again) {
        StackId id = CaptureStackFrom(pc, frame);
        EXPECT_EQ(StackPcs(id), (std::vector<uintptr_t>{pc, caller})) << round << " " << again;
      }
    }
  }
  // The end of the chain moved: the walk goes one record further.
  fake[3] = first;
  fake[4] = 0;
  fake[5] = second;
  fake[2] = reinterpret_cast<uintptr_t>(&fake[4]);
  EXPECT_EQ(StackPcs(CaptureStackFrom(pc, frame)), (std::vector<uintptr_t>{pc, first, second}));
  fake[2] = 0;
  EXPECT_EQ(StackPcs(CaptureStackFrom(pc, frame)), (std::vector<uintptr_t>{pc, first}));
}

// The shim's own frames never show: a stack captured inside hidden text
// starts at the first caller outside it (librdmasan.so hides its own text;
// here the test hides one call site of its own).
__attribute__((noinline)) KEEP_FP StackId HiddenCallee(int* line) {
  *line = __LINE__ + 1;  // the next line
  StackId id = CaptureStack();
  asm volatile("" ::: "memory");
  return id;
}

__attribute__((noinline)) KEEP_FP StackId CallerOfHidden(int* line, int* callee_line) {
  *line = __LINE__ + 1;  // the next line
  StackId id = HiddenCallee(callee_line);
  asm volatile("" ::: "memory");
  return id;
}

TEST(Stack, HiddenTextIsLeftOut) {
  int line = 0, callee_line = 0;
  StackId before = CallerOfHidden(&line, &callee_line);
  std::vector<uintptr_t> pcs = StackPcs(before);
  ASSERT_GE(pcs.size(), 2u);
  HideTextRange(pcs[0] - 1, pcs[0] + 1);  // HiddenCallee's call of CaptureStack
  StackId after = CallerOfHidden(&line, &callee_line);
  std::vector<uintptr_t> got = StackPcs(after);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], pcs[1]);
  std::vector<Frame> frames = SymbolizeStack(after);
  ASSERT_FALSE(frames.empty());
  EXPECT_NE(frames[0].function.find("CallerOfHidden"), std::string::npos) << frames[0].function;
  EXPECT_EQ(frames[0].line, line);
  for (const Frame& f : frames) EXPECT_EQ(f.function.find("HiddenCallee"), std::string::npos) << f.function;
}

TEST(Stack, InternRoundTripsAndDedups) {
  uintptr_t pcs[] = {0x1000, 0x2000, 0x3000};
  StackId a = InternStack(pcs, 3);
  StackId b = InternStack(pcs, 3);
  StackId c = InternStack(pcs, 2);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(StackPcs(a), std::vector<uintptr_t>(pcs, pcs + 3));
  EXPECT_EQ(InternStack(pcs, 0), 0u);
  EXPECT_TRUE(StackPcs(0).empty());
  EXPECT_TRUE(StackPcs(0xfffffff0u).empty());
  std::vector<uintptr_t> many(100);
  for (size_t i = 0; i < many.size(); ++i) many[i] = 0x10000 + i;
  EXPECT_EQ(StackPcs(InternStack(many.data(), many.size())).size(), kMaxStackFrames);
}

TEST(Stack, OddAddressesNeverCrash) {
  std::vector<uintptr_t> pcs = {0, 1, 4095, 0xdeadbeef, ~uintptr_t{0}, uintptr_t{1} << 47};
  std::vector<Frame> frames = SymbolizePcs(pcs);
  ASSERT_EQ(frames.size(), pcs.size());
  EXPECT_EQ(FormatFrame(frames[0]), "0x0 (<unknown>)");
  EXPECT_EQ(FormatFrame(frames[3]), "0xdeadbeef (<unknown>)");
  Frame module_only;
  module_only.pc = 0x7f0000001234;
  module_only.module = "/lib/libfoo.so";
  module_only.module_offset = 0x1234;
  EXPECT_EQ(FormatFrame(module_only), "0x7f0000001234 (/lib/libfoo.so+0x1234)");
  module_only.function = "foo";
  EXPECT_EQ(FormatFrame(module_only), "0x7f0000001234 in foo (/lib/libfoo.so+0x1234)");
}

TEST(Stack, LibraryFramesNameTheirModule) {
  uintptr_t pc = reinterpret_cast<uintptr_t>(&::getpid) + 4;
  std::vector<Frame> frames = SymbolizePcs({pc});
  ASSERT_FALSE(frames.empty());
  EXPECT_NE(frames.back().module.find("libc"), std::string::npos) << frames.back().module;
  EXPECT_NE(frames.back().function.find("getpid"), std::string::npos) << frames.back().function;
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// symbol_cache=: what a process symbolizes is written to the file, one
// line per PC, and a process that names the file takes its frames from it
// (the function renamed in the file shows); a line that does not parse is
// ignored and the PC symbolized from its module again.
TEST(Stack, SymbolCacheIsWrittenAndRead) {
  char dir[] = "/tmp/rdmasan_symcache_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string a = std::string(dir) + "/a", b = std::string(dir) + "/b", c = std::string(dir) + "/c";
  int line = 0;
  const StackId id = CaptureHere(&line);
  SetSymbolCache(a);
  const std::vector<Frame> live = SymbolizeStack(id);
  ASSERT_FALSE(live.empty());
  EXPECT_EQ(live[0].line, line);
  const std::string text = FileText(a);
  const std::string first =
      "\t1\t" + live[0].function + "\t" + live[0].file + "\t" + std::to_string(line) + "\n";
  const size_t at = text.find(first);
  ASSERT_NE(at, std::string::npos) << text;
  const size_t start = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
  const std::string key = text.substr(start, at - start);

  std::string renamed = text;
  renamed.replace(at, first.size(),
                  "\t1\tfrom_the_cache\t" + live[0].file + "\t" + std::to_string(line) + "\n");
  WriteFile(b, "not a line\n" + key + "\t9\n\t\t\n" + renamed);
  SetSymbolCache(b);
  std::vector<Frame> cached = SymbolizeStack(id);
  ASSERT_EQ(cached.size(), live.size());
  EXPECT_EQ(cached[0].function, "from_the_cache");
  EXPECT_EQ(cached[0].file, live[0].file);
  EXPECT_EQ(cached[0].line, line);
  EXPECT_EQ(cached[0].pc, live[0].pc);
  EXPECT_EQ(cached[0].module, live[0].module);
  EXPECT_EQ(cached[0].module_offset, live[0].module_offset);
  for (size_t i = 1; i < live.size(); ++i) EXPECT_EQ(FormatFrame(cached[i]), FormatFrame(live[i])) << i;

  // The key's line with two frames announced and one given, or a line
  // number that is not one: symbolized from the module again.
  WriteFile(c, key + "\t2\tfrom_the_cache\tf.c\t1\n" + key + "\t1\tfrom_the_cache\tf.c\tx\n");
  SetSymbolCache(c);
  cached = SymbolizeStack(id);
  ASSERT_FALSE(cached.empty());
  EXPECT_EQ(cached[0].function, live[0].function);
  EXPECT_NE(FileText(c).find(first), std::string::npos);  // and written again

  SetSymbolCache("");
  for (const std::string& f : {a, b, c}) unlink(f.c_str());
  rmdir(dir);
}

TEST(Stack, OfflineSymbolizationMatchesLive) {
  int line = 0;
  std::vector<Frame> live = SymbolizeStack(CaptureHere(&line));
  ASSERT_FALSE(live.empty());
  std::vector<std::pair<std::string, uintptr_t>> mods;
  uintptr_t last_pc = 0;
  for (const Frame& f : live) {
    if (f.pc == last_pc) continue;  // one entry per pc (inlined frames repeat it)
    last_pc = f.pc;
    mods.emplace_back(f.module, f.module_offset);
  }
  mods.emplace_back("/nonexistent/libnothing.so", 0x1234);
  std::vector<Frame> offline = SymbolizeOffline(mods);
  ASSERT_GE(offline.size(), 2u);
  EXPECT_EQ(offline[0].function, live[0].function);
  EXPECT_EQ(offline[0].file, live[0].file);
  EXPECT_EQ(offline[0].line, line);
  EXPECT_EQ(offline[0].module, live[0].module);
  EXPECT_EQ(offline[0].module_offset, live[0].module_offset);
  EXPECT_EQ(FormatFrame(offline.back()), "0x1234 (/nonexistent/libnothing.so+0x1234)");
}

TEST(Stack, ConcurrentCapturesAgree) {
  int line = 0;
  StackId expected = 0;
  std::vector<StackId> got(8);
  std::vector<std::thread> threads;
  uintptr_t base = 0x5000000;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        uintptr_t pcs[2] = {base + static_cast<uintptr_t>(i), 0x42};
        StackId id = InternStack(pcs, 2);
        if (StackPcs(id) != std::vector<uintptr_t>(pcs, pcs + 2)) ADD_FAILURE() << "bad round trip";
      }
      int l = 0;
      got[t] = CaptureHere(&l);
    });
  }
  for (auto& th : threads) th.join();
  (void)line;
  (void)expected;
  // Different threads: same frame #0; the rest may differ (thread entry).
  for (StackId id : got) EXPECT_EQ(StackPcs(id)[0], StackPcs(got[0])[0]);
  uintptr_t pcs[2] = {base + 7, 0x42};
  size_t before = StackDepotSize();
  InternStack(pcs, 2);
  EXPECT_EQ(StackDepotSize(), before) << "already interned by a thread";
}

TEST(Stack, CaptureIsCheap) {
  int line = 0;
  CaptureHere(&line);
  constexpr int kIters = 200000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    int l;
    CaptureHere(&l);
  }
  double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / kIters;
  std::printf("capture+intern: %.1f ns\n", ns);
  EXPECT_LT(ns, 20000.0);  // sanity only; benchmarks live in bench/
}

}  // namespace
}  // namespace rdmasan::core
