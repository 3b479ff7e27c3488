// `rdmasan trace export --format=perfetto`: the Chrome trace-event JSON it
// prints parses, keeps its structure, and carries the recorded executable's
// path (any bytes the traced program had) as valid JSON.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/event.h"
#include "traces/trace.h"

namespace rdmasan::cli {
namespace {

using core::Event;
using core::EventKind;
using traces::TraceHeader;
using traces::TraceWriter;

// A trace of one QP on one CQ: one signaled RDMA WRITE and its completion.
void WriteTrace(const std::string& path, const std::string& executable) {
  TraceHeader h = traces::CurrentProcessHeader();
  h.executable = executable;
  auto w = TraceWriter::Open(path, h);
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
  e.kind = EventKind::kPostSend;
  e.obj = 3;
  core::SendWr wr;
  wr.wr_id = 0x2a;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.num_sge = 1;
  wr.sges.push_back({0x1000, 8, 0x11, 0, 0});
  e.send_wrs.push_back(wr);
  append(e);
  e = Event();
  e.kind = EventKind::kPollCq;
  e.obj = 2;
  e.count = 1;
  e.wcs.push_back({0x2a, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0x100, 8, 0});
  append(e);
  ASSERT_TRUE((*w)->Close().ok());
}

// Runs the export; its stdout, and its exit status in *status.
std::string Export(const std::string& trace, int* status) {
  const std::string cmd = std::string(RDMASAN_CLI) + " trace export --format=perfetto '" + trace + "'";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

nlohmann::json ExportOf(const std::string& executable, const std::string& name) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/perfetto_", getpid(), "_", name, ".trace");
  WriteTrace(path, executable);
  int status = -1;
  const std::string out = Export(path, &status);
  unlink(path.c_str());
  EXPECT_EQ(status, 0) << out;
  nlohmann::json j;
  EXPECT_NO_THROW(j = nlohmann::json::parse(out)) << out;
  return j;
}

const nlohmann::json* Find(const nlohmann::json& events, const std::string& ph, const std::string& name) {
  for (const auto& e : events)
    if (e["ph"] == ph && e["name"] == name) return &e;
  return nullptr;
}

TEST(PerfettoExport, Structure) {
  const nlohmann::json j = ExportOf("/usr/bin/client", "plain");
  EXPECT_EQ(j["displayTimeUnit"], "ns");
  EXPECT_EQ(j["otherData"]["executable"], "/usr/bin/client");
  const nlohmann::json& events = j["traceEvents"];
  const auto pid = events[0]["pid"].get<long long>();
  EXPECT_EQ(pid, getpid());
  ASSERT_NE(Find(events, "M", "process_name"), nullptr);
  EXPECT_EQ((*Find(events, "M", "process_name"))["args"]["name"],
            "/usr/bin/client (pid " + std::to_string(getpid()) + ")");
  const nlohmann::json* track = Find(events, "M", "thread_name");
  ASSERT_NE(track, nullptr);
  EXPECT_EQ((*track)["tid"], 3);
  EXPECT_EQ((*track)["args"]["name"], "QP 0x3 (qpn 0x100)");
  const nlohmann::json* post = Find(events, "X", "RDMA_WRITE");
  ASSERT_NE(post, nullptr) << events;
  EXPECT_EQ((*post)["cat"], "post");
  EXPECT_EQ((*post)["ts"], 7.0);
  EXPECT_EQ((*post)["args"],
            nlohmann::json::parse(R"({"wrs":1,"first_wr_id":"0x2a","ret":0,"signaled":true})"));
  const nlohmann::json* done = Find(events, "i", "completion");
  ASSERT_NE(done, nullptr) << events;
  EXPECT_EQ((*done)["tid"], 3);
  EXPECT_EQ((*done)["args"]["wr_id"], "0x2a");
  const nlohmann::json* sq = Find(events, "C", "SQ occupancy QP 0x3");
  ASSERT_NE(sq, nullptr) << events;
  EXPECT_EQ((*sq)["args"]["value"], 1);
  ASSERT_NE(Find(events, "C", "CQ 0x2 pending"), nullptr) << events;
}

TEST(PerfettoExport, ExecutablePathIsEscaped) {
  const std::string exe = "/opt/dir \"q\"\\x/\xe2\x86\x92\n\t\x01 caf\xc3\xa9";
  const nlohmann::json j = ExportOf(exe, "odd");
  EXPECT_EQ(j["otherData"]["executable"], exe);
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], exe + " (pid " + std::to_string(getpid()) + ")");
}

TEST(PerfettoExport, InvalidUtf8BecomesReplacementCharacters) {
  const nlohmann::json j = ExportOf("/opt/bad\xff\xfe name \xc3", "bad");
  const std::string got = j["otherData"]["executable"];
  EXPECT_EQ(got.rfind("/opt/bad", 0), 0u) << got;
  EXPECT_NE(got.find("\xef\xbf\xbd name "), std::string::npos) << got;
  EXPECT_FALSE(j["traceEvents"].empty());
}

}  // namespace
}  // namespace rdmasan::cli
