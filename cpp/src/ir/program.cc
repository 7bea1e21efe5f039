// Program validation: tiers, queues, buffers, operands per kind, dataflow order, and the memory plan.
#include "tt/ir/program.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "tt/common/error.h"

namespace tt {
namespace {

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "program: " + message);
}

std::string instruction_name(const Instruction& instruction) {
  std::string name = std::string(instruction_kind_name(instruction.kind)) + " " + std::to_string(instruction.id);
  if (!instruction.label.empty()) name += " ('" + instruction.label + "')";
  return name;
}

std::string buffer_name(const Buffer& buffer) {
  std::string name = "buffer " + std::to_string(buffer.id);
  if (!buffer.label.empty()) name += " ('" + buffer.label + "')";
  return name;
}

void check_tiers_and_queues(const ProgramSpec& spec) {
  std::unordered_set<std::string> names;
  for (std::size_t t = 0; t < spec.tiers.size(); ++t) {
    const Tier& tier = spec.tiers[t];
    if (tier.name.empty() || !names.insert(tier.name).second) {
      reject("tier " + std::to_string(t) + ": name '" + tier.name + "' is empty or repeated");
    }
    if (tier.capacity_bytes < 0) {
      reject("tier '" + tier.name + "': capacity_bytes must be >= 0, got " + std::to_string(tier.capacity_bytes));
    }
  }
  names.clear();
  for (std::size_t q = 0; q < spec.queues.size(); ++q) {
    const Queue& queue = spec.queues[q];
    if (queue.name.empty() || !names.insert(queue.name).second) {
      reject("queue " + std::to_string(q) + ": name '" + queue.name + "' is empty or repeated");
    }
    if (queue.capacity < 1) {
      reject("queue '" + queue.name + "': capacity must be >= 1, got " + std::to_string(queue.capacity));
    }
  }
  for (const FileSpec& file : spec.files) {
    // Rounded up without overflow: bytes may be anything a saved program says.
    const std::int64_t chunks = file.chunk_bytes > 0 && file.bytes >= 0
                                    ? file.bytes / file.chunk_bytes + (file.bytes % file.chunk_bytes != 0)
                                    : 0;
    if (file.path.empty() || file.bytes < 0 || file.chunk_bytes < 0 ||
        static_cast<std::int64_t>(file.chunk_sha256.size()) != chunks) {
      reject("file '" + file.path + "': expected a path, bytes >= 0 and one digest per chunk (" +
             std::to_string(chunks) + "), got " + std::to_string(file.chunk_sha256.size()) + " digests");
    }
  }
}

void check_buffer(const ProgramSpec& spec, const Buffer& buffer) {
  const std::string who = buffer_name(buffer);
  if (buffer.tier < 0 || buffer.tier >= static_cast<std::int32_t>(spec.tiers.size())) {
    reject(who + ": unknown tier " + std::to_string(buffer.tier) + " (the program has " +
           std::to_string(spec.tiers.size()) + ")");
  }
  if (buffer.bytes < 0) reject(who + ": bytes must be >= 0, got " + std::to_string(buffer.bytes));
  if (buffer.alignment < 1 || (buffer.alignment & (buffer.alignment - 1)) != 0) {
    reject(who + ": alignment must be a power of two, got " + std::to_string(buffer.alignment));
  }
  if (buffer.phase < 0 || buffer.phase >= buffer.alignment) {
    reject(who + ": phase must be in [0, alignment " + std::to_string(buffer.alignment) + "), got " +
           std::to_string(buffer.phase));
  }
  for (std::int64_t dim : buffer.shape) {
    if (dim < 0) reject(who + ": shape dimensions must be >= 0, got " + std::to_string(dim));
  }
  const bool on_disk = spec.tiers[buffer.tier].kind == TierKind::Disk;
  if (buffer.file >= 0) {
    if (!on_disk || buffer.lifetime != BufferLifetime::Resident) {
      reject(who + ": a file range must be a resident buffer on a disk tier");
    }
    if (buffer.file >= static_cast<std::int32_t>(spec.files.size())) {
      reject(who + ": unknown file " + std::to_string(buffer.file));
    }
    const FileSpec& file = spec.files[buffer.file];
    if (buffer.file_offset < 0 || buffer.file_offset > file.bytes - buffer.bytes) {
      // Offset and length, not the range's end: their sum may overflow.
      reject(who + ": " + std::to_string(buffer.bytes) + " bytes at offset " + std::to_string(buffer.file_offset) +
             " lie outside '" + file.path + "' (" + std::to_string(file.bytes) + " bytes)");
    }
  } else if (on_disk && buffer.lifetime != BufferLifetime::Transient) {
    reject(who + ": a disk buffer is a file range (file >= 0) or a transient spill");
  }
  if (buffer.lifetime == BufferLifetime::Input && on_disk) reject(who + ": an input cannot live on a disk tier");
  // Torch allocates memory, not file bytes: a torch-owned spill would have no place in the spill file.
  if (buffer.torch_owned && on_disk) reject(who + ": a disk buffer cannot be torch-owned");
  if (buffer.crc32c != -1 && (buffer.file < 0 || buffer.crc32c < 0 || buffer.crc32c > 0xFFFFFFFFll)) {
    reject(who + ": crc32c is the checksum of a file range, a 32-bit value or -1; got " +
           std::to_string(buffer.crc32c) + (buffer.file < 0 ? " on a buffer that is not a file range" : ""));
  }
}

// Checks an instruction's queue and operands against its kind.
class OperandChecker {
 public:
  OperandChecker(const ProgramSpec& spec, const std::unordered_map<std::int64_t, std::size_t>& position)
      : spec_(spec), position_(position) {}

  void check(const Instruction& instruction) const {
    const std::string who = instruction_name(instruction);
    if (!std::isfinite(instruction.declared_us) || instruction.declared_us < 0) {
      reject(who + ": declared_us must be finite and >= 0, got " + std::to_string(instruction.declared_us));
    }
    if (instruction.queue < 0 || instruction.queue >= static_cast<std::int32_t>(spec_.queues.size())) {
      reject(who + ": unknown queue " + std::to_string(instruction.queue) + " (the program has " +
             std::to_string(spec_.queues.size()) + ")");
    }
    for (const auto* list : {&instruction.reads, &instruction.writes}) {
      for (std::int64_t id : *list) {
        if (!position_.count(id)) reject(who + ": unknown buffer " + std::to_string(id));
      }
    }
    const QueueKind queue = spec_.queues[instruction.queue].kind;
    switch (instruction.kind) {
      case InstructionKind::Compute:
        expect_queue(who, queue, {QueueKind::Compute});
        for (const auto* list : {&instruction.reads, &instruction.writes}) {
          for (std::int64_t id : *list) {
            if (tier_kind(id) == TierKind::Disk) reject(who + ": cannot compute on " + name(id) + ", which is on disk");
          }
        }
        break;
      case InstructionKind::Copy:
        expect_queue(who, queue, {QueueKind::Link});
        if (instruction.reads.empty()) reject(who + ": copies nothing");
        if (instruction.reads.size() != instruction.writes.size()) {
          reject(who + ": reads " + std::to_string(instruction.reads.size()) + " buffers but writes " +
                 std::to_string(instruction.writes.size()) + "; a copy pairs them");
        }
        for (std::size_t i = 0; i < instruction.reads.size(); ++i) {
          same_size(who, instruction.reads[i], instruction.writes[i]);
          if (tier_kind(instruction.reads[i]) == TierKind::Disk || tier_kind(instruction.writes[i]) == TierKind::Disk) {
            reject(who + ": copies to or from disk are loads, spills or reloads");
          }
        }
        break;
      case InstructionKind::Load:
        one_to_one(who, instruction, queue, TierKind::Disk, TierKind::Host);
        if (buffer(instruction.reads[0]).file < 0) reject(who + ": reads " + name(instruction.reads[0]) + ", which is not a file range");
        break;
      case InstructionKind::Spill:
        one_to_one(who, instruction, queue, TierKind::Host, TierKind::Disk);
        if (buffer(instruction.writes[0]).file >= 0) reject(who + ": writes " + name(instruction.writes[0]) + ", a file range; spills go to the spill file");
        break;
      case InstructionKind::Reload:
        one_to_one(who, instruction, queue, TierKind::Disk, TierKind::Host);
        if (buffer(instruction.reads[0]).file >= 0) reject(who + ": reads " + name(instruction.reads[0]) + ", a file range; that is a load");
        break;
      case InstructionKind::Free:
        if (instruction.reads.empty() || !instruction.writes.empty()) {
          reject(who + ": a free reads the buffers it frees and writes none");
        }
        break;
      default:
        reject(who + ": unknown kind " + std::to_string(static_cast<int>(instruction.kind)));
    }
  }

 private:
  const Buffer& buffer(std::int64_t id) const { return spec_.buffers[position_.at(id)]; }
  std::string name(std::int64_t id) const { return buffer_name(buffer(id)); }
  TierKind tier_kind(std::int64_t id) const { return spec_.tiers[buffer(id).tier].kind; }

  void expect_queue(const std::string& who, QueueKind got, std::initializer_list<QueueKind> allowed) const {
    if (std::find(allowed.begin(), allowed.end(), got) != allowed.end()) return;
    std::string names;
    for (QueueKind kind : allowed) names += (names.empty() ? "" : " or ") + std::string(queue_kind_name(kind));
    reject(who + ": runs on a " + names + " queue, got a " + queue_kind_name(got) + " queue");
  }

  void same_size(const std::string& who, std::int64_t from, std::int64_t to) const {
    if (buffer(from).bytes != buffer(to).bytes) {
      reject(who + ": " + name(from) + " holds " + std::to_string(buffer(from).bytes) + " bytes but " + name(to) +
             " holds " + std::to_string(buffer(to).bytes));
    }
  }

  void one_to_one(const std::string& who, const Instruction& instruction, QueueKind queue, TierKind from,
                  TierKind to) const {
    expect_queue(who, queue, {QueueKind::Io});
    if (instruction.reads.size() != 1 || instruction.writes.size() != 1) {
      reject(who + ": reads one buffer and writes one, got " + std::to_string(instruction.reads.size()) + " and " +
             std::to_string(instruction.writes.size()));
    }
    if (tier_kind(instruction.reads[0]) != from || tier_kind(instruction.writes[0]) != to) {
      reject(who + ": moves bytes from a " + tier_kind_name(from) + " tier to a " + tier_kind_name(to) + " tier");
    }
    same_size(who, instruction.reads[0], instruction.writes[0]);
  }

  const ProgramSpec& spec_;
  const std::unordered_map<std::int64_t, std::size_t>& position_;
};

struct Accesses {
  std::vector<std::size_t> readers, writers, frees;  // instruction positions
};

}  // namespace

Program::Program(ProgramSpec spec) : spec_(std::move(spec)) {
  check_tiers_and_queues(spec_);
  // Sizes and alignments far beyond any machine, so that the memory plan's sums of offsets,
  // sizes and alignment padding stay far from int64's range.
  constexpr std::int64_t kMaxTotalBytes = std::int64_t{1} << 60, kMaxAlignment = std::int64_t{1} << 30;
  std::int64_t total_bytes = 0;
  for (std::size_t i = 0; i < spec_.buffers.size(); ++i) {
    check_buffer(spec_, spec_.buffers[i]);
    const Buffer& buffer = spec_.buffers[i];
    if (buffer.alignment > kMaxAlignment) {
      reject(buffer_name(buffer) + ": alignment " + std::to_string(buffer.alignment) + " is above the limit of " +
             std::to_string(kMaxAlignment));
    }
    if (buffer.bytes > kMaxTotalBytes - total_bytes) {
      reject(buffer_name(buffer) + ": " + std::to_string(buffer.bytes) + " bytes take the program's buffers past " +
             std::to_string(kMaxTotalBytes) + " bytes in all");
    }
    total_bytes += buffer.bytes;
    if (!buffer_position_.emplace(spec_.buffers[i].id, i).second) {
      reject("duplicate buffer id " + std::to_string(spec_.buffers[i].id));
    }
  }
  const OperandChecker operands(spec_, buffer_position_);
  for (const Instruction& instruction : spec_.instructions) operands.check(instruction);
  std::unordered_set<std::int64_t> returned;
  for (std::int64_t id : spec_.outputs) {
    if (!buffer_position_.count(id)) reject("output: unknown buffer " + std::to_string(id));
    if (!returned.insert(id).second) reject("output: buffer " + std::to_string(id) + " listed twice");
  }

  const Schedule given(spec_.instructions);
  const HappensBefore order(given);
  std::vector<Accesses> accesses(spec_.buffers.size());
  for (std::size_t p = 0; p < spec_.instructions.size(); ++p) {
    const Instruction& instruction = spec_.instructions[p];
    const bool frees = instruction.kind == InstructionKind::Free;
    for (std::int64_t id : instruction.reads) {
      auto& access = accesses[buffer_position_.at(id)];
      (frees ? access.frees : access.readers).push_back(p);
    }
    for (std::int64_t id : instruction.writes) accesses[buffer_position_.at(id)].writers.push_back(p);
  }

  std::vector<BufferInterval> intervals(spec_.buffers.size(), {BufferInterval::npos, BufferInterval::npos});
  for (std::size_t b = 0; b < spec_.buffers.size(); ++b) {
    const Buffer& buffer = spec_.buffers[b];
    const Accesses& access = accesses[b];
    const auto& ins = spec_.instructions;
    const std::string who = buffer_name(buffer);
    if (buffer.lifetime != BufferLifetime::Transient) {
      if (!access.frees.empty()) {
        reject(instruction_name(ins[access.frees[0]]) + " frees " + who + ", which is " +
               buffer_lifetime_name(buffer.lifetime) + ": only transient buffers are freed");
      }
      const bool read_only = buffer.lifetime == BufferLifetime::Input || buffer.file >= 0;
      if (read_only && !access.writers.empty()) {
        reject(instruction_name(ins[access.writers[0]]) + " writes " + who + ", which is read-only (" +
               (buffer.file >= 0 ? "a file range" : "an input") + ")");
      }
      continue;
    }
    if (access.writers.empty()) {
      if (!access.readers.empty()) reject(instruction_name(ins[access.readers[0]]) + " reads " + who + ", which nothing writes");
      if (!access.frees.empty()) reject(instruction_name(ins[access.frees[0]]) + " frees " + who + ", which nothing writes");
      if (returned.count(buffer.id)) reject("output " + who + " is never written");
      continue;
    }
    // The first write must come before every other use, in every order the executor may pick.
    const std::size_t first = *std::min_element(access.writers.begin(), access.writers.end(), [&](auto a, auto c) {
      return order.rank()[a] < order.rank()[c];
    });
    for (const auto* list : {&access.readers, &access.writers, &access.frees}) {
      for (std::size_t p : *list) {
        if (p == first || order.precedes(first, p)) continue;
        if (list == &access.writers) {
          reject(instruction_name(ins[p]) + " and " + instruction_name(ins[first]) + " both write " + who +
                 " with no order between them");
        }
        reject(instruction_name(ins[p]) + " may read " + who + " before " + instruction_name(ins[first]) +
               " writes it (no dependency orders them)");
      }
    }
    intervals[b].first_write = first;
    if (access.frees.size() > 1) {
      reject("double free: " + instruction_name(ins[access.frees[0]]) + " and " + instruction_name(ins[access.frees[1]]) +
             " both free " + who);
    }
    if (access.frees.empty()) {
      if (!returned.count(buffer.id)) reject(who + " is never freed: free it, or list it among the outputs");
      continue;
    }
    if (returned.count(buffer.id)) reject("output " + who + " is freed by " + instruction_name(ins[access.frees[0]]));
    const std::size_t free = access.frees[0];
    for (const auto* list : {&access.readers, &access.writers}) {
      for (std::size_t p : *list) {
        if (!order.precedes(p, free)) {
          reject(instruction_name(ins[p]) + " may use " + who + " after " + instruction_name(ins[free]) +
                 " frees it (the free does not depend on it)");
        }
      }
    }
    intervals[b].free = free;
  }

  first_writes_.resize(spec_.instructions.size());
  frees_.resize(spec_.instructions.size());
  for (std::size_t b = 0; b < intervals.size(); ++b) {
    if (intervals[b].first_write != BufferInterval::npos) first_writes_[intervals[b].first_write].push_back(b);
    if (intervals[b].free != BufferInterval::npos) frees_[intervals[b].free].push_back(b);
  }
  plan_ = plan_memory(spec_.tiers, spec_.buffers, intervals, order.rank(), order);
  for (std::size_t t = 0; t < spec_.tiers.size(); ++t) {
    if (plan_.arena_bytes[t] > spec_.tiers[t].capacity_bytes) {
      throw Error(ErrorCode::ResourceExhausted,
                  "program: tier '" + spec_.tiers[t].name + "' needs " + std::to_string(plan_.arena_bytes[t]) +
                      " bytes (" + std::to_string(plan_.resident_bytes[t]) + " resident) but its capacity is " +
                      std::to_string(spec_.tiers[t].capacity_bytes) + " bytes");
    }
  }
  std::vector<Instruction> instructions = spec_.instructions;
  for (const auto& [freed, written] : plan_.reuse_deps) {
    instructions[written].deps.push_back(spec_.instructions[freed].id);
  }
  for (Instruction& instruction : instructions) std::sort(instruction.deps.begin(), instruction.deps.end());
  schedule_ = std::make_shared<const Schedule>(std::move(instructions));
}

std::size_t Program::buffer_position(std::int64_t id) const {
  const auto found = buffer_position_.find(id);
  if (found == buffer_position_.end()) throw Error(ErrorCode::NotFound, "program: no buffer " + std::to_string(id));
  return found->second;
}

}  // namespace tt
