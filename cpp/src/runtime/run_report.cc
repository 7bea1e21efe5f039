// Renders a RunReport as Chrome trace-event JSON for chrome://tracing and Perfetto.
#include "tt/runtime/run_report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

namespace tt {
namespace {

void append_string(std::string& out, const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        // JSON forbids raw control characters; bytes >= 0x80 (UTF-8) pass through.
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Shortest round-trip form; JSON has no NaN or infinity, so those become 0.
void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) value = 0.0;
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

void append_integer(std::string& out, std::int64_t value) { out += std::to_string(value); }

// Records built by hand (Python's InstructionRecord) skip the schedule's validation, so
// anything short of two usable times counts as no prediction.
bool has_prediction(const InstructionRecord& record) {
  return std::isfinite(record.predicted_start_us) && std::isfinite(record.predicted_end_us) &&
         record.predicted_start_us >= 0 && record.predicted_end_us >= 0;
}

}  // namespace

std::string chrome_trace_json(const RunReport& report) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  const auto begin_event = [&] {
    if (!first) out += ',';
    first = false;
  };

  // One named row per worker that ran something, so the viewer labels the rows.
  std::set<std::int32_t> workers;
  for (const InstructionRecord& record : report.records) {
    if (record.ran) workers.insert(record.worker);
  }
  for (std::int32_t worker : workers) {
    begin_event();
    out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":";
    append_integer(out, worker);
    out += ",\"args\":{\"name\":";
    append_string(out, worker == 0 ? std::string("caller") : "worker " + std::to_string(worker));
    out += "}}";
  }

  for (const InstructionRecord& record : report.records) {
    if (!record.ran) continue;
    begin_event();
    out += "{\"name\":";
    append_string(out, record.label.empty() ? "instruction " + std::to_string(record.id) : record.label);
    out += ",\"cat\":";
    append_string(out, record.kind);
    out += ",\"ph\":\"X\",\"ts\":";
    append_number(out, record.start_us);
    out += ",\"dur\":";
    append_number(out, record.end_us - record.start_us);
    out += ",\"pid\":1,\"tid\":";
    append_integer(out, record.worker);
    out += ",\"args\":{\"id\":";
    append_integer(out, record.id);
    out += ",\"device\":";
    append_string(out, record.device);
    if (has_prediction(record)) {
      out += ",\"predicted_start_us\":";
      append_number(out, record.predicted_start_us);
      out += ",\"predicted_end_us\":";
      append_number(out, record.predicted_end_us);
    }
    out += "}}";
  }

  out += "],\"displayTimeUnit\":\"ms\"}";
  return out;
}

namespace {

using Spans = std::vector<std::pair<double, double>>;

// The records of `kind` that ran, as disjoint sorted spans.
Spans union_of(const RunReport& report, const std::string& kind) {
  Spans spans;
  for (const InstructionRecord& record : report.records) {
    if (record.ran && record.kind == kind) spans.emplace_back(record.start_us, record.end_us);
  }
  std::sort(spans.begin(), spans.end());
  Spans merged;
  for (const auto& [begin, end] : spans) {
    if (!merged.empty() && begin <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, end);
    } else {
      merged.emplace_back(begin, end);
    }
  }
  return merged;
}

double length(const Spans& spans) {
  double total = 0.0;
  for (const auto& [begin, end] : spans) total += end - begin;
  return total;
}

}  // namespace

void summarize_reads(RunReport& report) {
  report.bytes_read = 0;
  for (const InstructionRecord& record : report.records) {
    if (record.ran && record.kind == "load") report.bytes_read += record.bytes;
  }
  const Spans reads = union_of(report, "load");
  const Spans computes = union_of(report, "compute");
  report.read_us = length(reads);
  double overlapped = 0.0;
  for (const auto& [begin, end] : reads) {
    for (const auto& [other_begin, other_end] : computes) overlapped += std::max(0.0, std::min(end, other_end) - std::max(begin, other_begin));
  }
  report.read_overlapped_us = overlapped;
}

}  // namespace tt
