// Decisions in traces, offline (issue 11): `rdmasan trace decisions` prints
// a decision log that parses back to the recorded decisions and settings,
// `trace dump` shows them numbered, `trace stats` counts them per point,
// `replay` shows them where its findings
// go and names the injected fault in the finding it preceded; bad input is
// a clear error, never a crash.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/decision.h"
#include "core/event.h"
#include "traces/trace.h"

namespace rdmasan::cli {
namespace {

using core::Event;
using core::EventKind;

// One RC QP (qpn 0x100) on one CQ; a scheduler decision, a SEND, an
// injected RETRY_EXC_ERR for it and its error completion.  bad_point: the
// wc.error decision names a point that does not exist.
void WriteTrace(const std::string& path, bool bad_point = false) {
  traces::TraceHeader h = traces::CurrentProcessHeader();
  h.properties = {{"RDMASAN_OPTIONS", "faults=wc.error:p=0.5:status=retry-exc:reorder=random:seed=42"}};
  auto w = traces::TraceWriter::Open(path, h);
  ASSERT_TRUE(w.ok()) << w.status();
  uint64_t seq = 1;
  auto append = [&](Event e) {
    e.seq = seq++;
    (*w)->Append(e);
  };
  Event e;
  e.kind = EventKind::kAllocPd;
  e.obj = 1;
  append(e);
  e = Event();
  e.kind = EventKind::kCreateCq;
  e.obj = 2;
  e.cqe = 16;
  append(e);
  e = Event();
  e.kind = EventKind::kCreateQp;
  e.obj = 3;
  e.parent = 1;
  e.send_cq = e.recv_cq = 2;
  e.qp_type = IBV_QPT_RC;
  e.qp_num = 0x100;
  e.caps = {16, 16, 1, 1, 0};
  append(e);
  for (uint32_t s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    e = Event();
    e.kind = EventKind::kModifyQp;
    e.obj = 3;
    e.attr_mask = IBV_QP_STATE;
    e.qp_state = s;
    append(e);
  }
  e = Event();
  e.kind = EventKind::kDecision;
  e.count = static_cast<uint32_t>(core::Point::kSchedPick);
  e.obj = 2;
  e.length = 4;
  e.addr = 2;
  append(e);
  e = Event();
  e.kind = EventKind::kPostSend;
  e.obj = 3;
  core::SendWr wr;
  wr.wr_id = 0x2a;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  e.send_wrs.push_back(wr);
  append(e);
  e = Event();
  e.kind = EventKind::kDecision;
  e.count = bad_point ? 99 : static_cast<uint32_t>(core::Point::kWcError);
  e.obj = 3;
  e.length = 1;
  e.addr = IBV_WC_RETRY_EXC_ERR;
  e.qp_num = 0x100;
  e.wcs.push_back({0x2a, IBV_WC_RETRY_EXC_ERR, 0, 0x100, 0, 0});
  append(e);
  e = Event();
  e.kind = EventKind::kPollCq;
  e.obj = 2;
  e.count = 1;
  e.ret = 1;
  e.wcs.push_back({0x2a, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, 0x100, 0, 0});
  append(e);
  ASSERT_TRUE((*w)->Close().ok());
}

// Runs `rdmasan ARGS` (stderr too); its output, and its exit status in *status.
std::string Cli(const std::string& args, int* status) {
  const std::string cmd = std::string(RDMASAN_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

std::string TempTrace(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/trace_decisions_", getpid(), "_", name, ".trace");
}

TEST(TraceDecisions, PrintsALogThatParsesBackToTheRecordedDecisions) {
  const std::string path = TempTrace("log");
  WriteTrace(path);
  int status = -1;
  const std::string out = Cli("trace decisions '" + path + "'", &status);
  EXPECT_EQ(status, 0) << out;
  auto log = core::ParseDecisionLog(out);
  ASSERT_TRUE(log.ok()) << log.status() << "\n" << out;
  EXPECT_EQ(log->reorder, "random");
  EXPECT_EQ(log->faults, "wc.error:p=0.5:status=retry-exc");
  ASSERT_EQ(log->decisions.size(), 2u) << out;
  EXPECT_EQ(log->decisions[0].key, (core::DecisionKey{core::Point::kSchedPick, 2, 4}));
  EXPECT_EQ(log->decisions[0].outcome, 2u);
  EXPECT_EQ(log->decisions[1].key, (core::DecisionKey{core::Point::kWcError, 3, 1}));
  EXPECT_EQ(log->decisions[1].outcome, uint64_t{IBV_WC_RETRY_EXC_ERR});
  EXPECT_NE(out.find("# decision #2: wc.error RETRY_EXC_ERR on QP 0x100 wr_id=0x2a (obj 3, hit 1)"),
            std::string::npos)
      << out;
  unlink(path.c_str());
}

TEST(TraceDecisions, DumpAndReplayShowThem) {
  const std::string path = TempTrace("dump");
  WriteTrace(path);
  int status = -1;
  std::string out = Cli("trace dump '" + path + "'", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" decision #1: sched.pick outcome 2 (obj 2, hit 4)\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" decision #2: wc.error RETRY_EXC_ERR on QP 0x100 wr_id=0x2a (obj 3, hit 1)\n"),
            std::string::npos)
      << out;
  out = Cli("trace stats '" + path + "'", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("decisions: wc.error 1, sched.pick 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("errors: 1 error completions"), std::string::npos)
      << out;  // the poll's, not the decision's
  out = Cli("replay '" + path + "'", &status);
  const size_t line = out.find("rdmasan: decision #2: wc.error RETRY_EXC_ERR on QP 0x100 wr_id=0x2a");
  const size_t finding = out.find("rdmasan: error-completion:");
  const size_t context =
      out.find("\n  after injected wc.error RETRY_EXC_ERR on QP 0x100 wr_id=0x2a (decision #2)\n");
  ASSERT_NE(line, std::string::npos) << out;
  ASSERT_NE(finding, std::string::npos) << out;
  ASSERT_NE(context, std::string::npos) << out;
  EXPECT_LT(line, finding);
  EXPECT_LT(finding, context);
  unlink(path.c_str());
}

TEST(TraceDecisions, BadInputIsAClearError) {
  int status = -1;
  std::string out = Cli("trace decisions", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("trace decisions TRACE"), std::string::npos) << out;
  out = Cli("trace decisions a b", &status);
  EXPECT_EQ(status, 2) << out;
  out = Cli("trace decisions /nonexistent/x.trace", &status);
  EXPECT_EQ(status, 3) << out;
  EXPECT_NE(out.find("/nonexistent/x.trace"), std::string::npos) << out;
  const std::string path = TempTrace("bad");
  WriteTrace(path, /*bad_point=*/true);
  out = Cli("trace decisions '" + path + "'", &status);
  EXPECT_EQ(status, 3) << out;
  EXPECT_NE(out.find("is not a valid decision (point 99"), std::string::npos) << out;
  // dump still shows it, readably.
  out = Cli("trace dump '" + path + "'", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("decision #2: point 99 outcome 12"), std::string::npos) << out;
  unlink(path.c_str());
}

}  // namespace
}  // namespace rdmasan::cli
