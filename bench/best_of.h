// The benchmarks' one-run summaries: Google Benchmark's console table, and
// each configuration's best round kept aside for a summary printed after it.
//
// Each configuration is registered once per round, as "<config>/round:<n>",
// rounds in turns (config A round 0, config B round 0, ..., config A round
// 1, ...): the configurations share the machine's state, and a scheduler
// hiccup hits one round, not the result.
#ifndef RDMASAN_BENCH_BEST_OF_H_
#define RDMASAN_BENCH_BEST_OF_H_

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rdmasan::bench {

class BestOfReporter : public benchmark::ConsoleReporter {
 public:
  // measure(run): the figure of one round; higher_is_better picks the best.
  // Colors only on a terminal (a reporter of one's own does not get the
  // library's --benchmark_color handling).
  BestOfReporter(std::function<double(const Run&)> measure, bool higher_is_better)
      : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular),
        measure_(std::move(measure)),
        higher_(higher_is_better) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      const std::string& name = run.run_name.function_name;
      const double v = measure_(run);
      auto [it, fresh] = best_.try_emplace(name.substr(0, name.rfind("/round:")), v);
      if (!fresh && (higher_ ? v > it->second : v < it->second)) it->second = v;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // The best round of a configuration; 0 if none ran.
  double Best(const std::string& config) const {
    auto it = best_.find(config);
    return it == best_.end() ? 0 : it->second;
  }

 private:
  std::function<double(const Run&)> measure_;
  bool higher_;
  std::map<std::string, double> best_;
};

}  // namespace rdmasan::bench

#endif  // RDMASAN_BENCH_BEST_OF_H_
