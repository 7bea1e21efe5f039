// Tests of chrome_trace_json: event layout, skipped instructions, predictions, and string escaping.
#include "tt/runtime/run_report.h"

#include <gtest/gtest.h>

namespace tt {
namespace {

InstructionRecord ran(std::int64_t id, std::string label, std::string device, std::int32_t worker, double start_us,
                      double end_us) {
  return {.id = id, .label = std::move(label), .kind = "compute", .device = std::move(device), .worker = worker,
          .start_us = start_us, .end_us = end_us, .ran = true};
}

TEST(ChromeTraceTest, EmptyReport) {
  EXPECT_EQ(chrome_trace_json({}), R"({"traceEvents":[],"displayTimeUnit":"ms"})");
}

TEST(ChromeTraceTest, OneRowPerWorkerAndOneEventPerInstructionThatRan) {
  RunReport report;
  report.workers = 3;
  report.records = {
      ran(1, "say \"hi\" \\ now\n\x01", "cuda:0", 1, 1.5, 4.0),
      ran(7, "", "cpu", 0, 0.0, 2.25),
      {.id = 9, .label = "skipped", .kind = "compute", .device = "cpu"},
  };
  const std::string expected =
      R"({"traceEvents":[)"
      R"({"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"caller"}},)"
      R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"worker 1"}},)"
      R"({"name":"say \"hi\" \\ now\n\u0001","cat":"compute","ph":"X","ts":1.5,"dur":2.5,"pid":1,"tid":1,)"
      R"("args":{"id":1,"device":"cuda:0"}},)"
      R"({"name":"instruction 7","cat":"compute","ph":"X","ts":0,"dur":2.25,"pid":1,"tid":0,)"
      R"("args":{"id":7,"device":"cpu"}})"
      R"(],"displayTimeUnit":"ms"})";
  EXPECT_EQ(chrome_trace_json(report), expected);
}

TEST(ChromeTraceTest, PredictionsJoinTheArgsOfEventsThatHaveThem) {
  RunReport report;
  InstructionRecord transfer = ran(3, "copy", "cuda:0", 0, 1.0, 2.0);
  transfer.kind = "transfer";
  transfer.predicted_start_us = 0.5;
  transfer.predicted_end_us = 1.75;
  InstructionRecord lone = ran(4, "lone", "cpu", 0, 2.0, 3.0);
  lone.predicted_start_us = 2.0;  // no end: not a prediction, so left out
  report.records = {transfer, lone};
  const std::string expected =
      R"({"traceEvents":[)"
      R"({"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"caller"}},)"
      R"({"name":"copy","cat":"transfer","ph":"X","ts":1,"dur":1,"pid":1,"tid":0,)"
      R"("args":{"id":3,"device":"cuda:0","predicted_start_us":0.5,"predicted_end_us":1.75}},)"
      R"({"name":"lone","cat":"compute","ph":"X","ts":2,"dur":1,"pid":1,"tid":0,)"
      R"("args":{"id":4,"device":"cpu"}})"
      R"(],"displayTimeUnit":"ms"})";
  EXPECT_EQ(chrome_trace_json(report), expected);
}

}  // namespace
}  // namespace tt
