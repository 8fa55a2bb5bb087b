// sprig/io/checkpoint.hpp — save and load a whole training state (model, optimizer, DST
// algorithm, progress, and the settings that defined the run), so that a run resumed from a
// checkpoint is bitwise the run that was never interrupted, for any TrainableModel
// (nn/model.hpp: Sequential, GPT, a user's class). (One PaddedCSR alone: io/padded_csr_file.hpp.)
//
//   // every N steps (t = the step just completed, 0-based):
//   sprig::save_training_state(dir / "state.sprig", model, optimizer,
//                              {.step = t + 1, .epoch = epoch, .batch = k + 1, .seed = seed}, &rigl);
//   // at start-up with --resume (model, optimizer, rigl built exactly as for a fresh run):
//   sprig::TrainingProgress p = sprig::load_training_state(dir / "state.sprig", model, optimizer, &rigl);
//   // continue with step p.step, epoch p.epoch (batches.start_epoch(p.epoch)), batch p.batch
//
// A program may also store what defined its run (RunSettings: options, sizes, file names as
// it names them) with save_training_state's last argument, and compare them with its options
// before it builds anything: read_run_settings(path) reads only those.
//
// What is saved: the model's structure (its layers, or its parameters' kinds and shapes),
// every parameter's weights, topology, per-slot optimizer state of live slots and decay flag,
// the optimizer's kind, options, step count and LR, the DST algorithm's name, schedule, seed,
// configuration, compact_threshold, counters, constant_fan_in and exclusions, the progress,
// and the run settings if given. Gradients are not saved (every step recomputes them; a load
// zeroes them). The byte layout, section by section: docs/checkpoint_format.md. Each layer
// kind and optimizer describes its own saved state in io/checkpoint_kinds.hpp; the sections
// are written and read in io/checkpoint_sections.hpp.
//
// Resume contract. Training is a function of each row's live entries in slot order (kernels
// sum a row in that order; drop/grow and erase work on positions within a row), of the
// per-slot state of live slots, of the optimizer's step count and LR, of the step index t
// (DST schedule, CounterRng(seed, layer, t) streams) and of the data order (seed, epoch,
// batch). All of that is restored bitwise. Where a row of the saved matrix had been
// relocated, the loaded matrix has the tight row-order layout (capacities
// PaddedCSR::capacity_for(row_nnz, padding_ratio)): absolute slot numbers and capacities
// are not part of the result of training, and PaddedCSR has no public way to rebuild an
// arbitrary layout. A matrix saved in that tight layout (freshly built or just compacted)
// loads slot for slot. Loaded arrays have no spare capacity: a DST run that had reserved
// growth room (SparseParameter::reserve_growth) reserves it again after loading.
//
// Loading validates everything first: the container and every checksum, each section
// against the target (value and index types, layer kinds and shapes, optimizer kind and
// options, DST algorithm name, schedule and seed), and each matrix against the PaddedCSR
// invariants (regions inside storage and disjoint, 0 <= nnz <= capacity, columns in range
// and distinct within a row); it decodes every section into temporaries and only then
// moves them into the targets with non-throwing operations. A load that throws leaves
// model, optimizer and algorithm unchanged. Every bad input throws sprig::FormatError
// naming the file, the section and the byte offset. No allocation is sized from a field
// before that field is checked against the bytes that remain.
//
// Writes are atomic (io/atomic_file.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../dst/algorithm.hpp"
#include "../nn/model.hpp"
#include "atomic_file.hpp"
#include "binary_format.hpp"
#include "checkpoint_kinds.hpp"
#include "checkpoint_sections.hpp"
#include "padded_csr_file.hpp"

namespace sprig {

// TrainingProgress (the loop's position: step, epoch, batch, seed) and RunSettings (what
// defined the run: ordered key/value pairs and their rules) are declared in
// io/checkpoint_sections.hpp, beside the sections that store them.

// ---- training state ---------------------------------------------------------------------

// The bytes of a training-state file (docs/checkpoint_format.md). `algorithm` may be null
// (no DST); `settings` are stored when non-empty. O(model bytes); reads the model only (safe
// alongside other readers); throws ArgumentError for settings that break RunSettings' rules
// (naming the entry) and otherwise only std::bad_alloc. The same state gives the same bytes.
template <class Optimizer, TrainableModel M>
std::vector<std::byte> encode_training_state(const M& model, const Optimizer& optimizer,
                                             const TrainingProgress& progress,
                                             const dst::AlgorithmFor<M>* algorithm = nullptr,
                                             const RunSettings& settings = {}) {
  namespace ck = detail::ckpt;
  binary::Writer w;
  w.header(binary::FileKind::training_state, ck::value_code<typename M::value_type>(),
           ck::index_code<typename M::index_type>());
  ck::put_structure(w, model);
  model.for_each_parameter([&](const auto& p) { ck::put_parameter(w, p); });
  ck::put_optimizer(w, optimizer);
  ck::put_algorithm(w, algorithm);
  ck::put_progress(w, progress);
  ck::put_settings(w, settings);
  return w.finish();
}

// Restores model, optimizer and (when given) algorithm from a training-state file in
// memory and returns the saved progress. The targets must be built like the saved run
// (same layers and shapes, optimizer kind and options, DST name, schedule and seed): the
// file's weights, topology, per-slot state, decay flags, optimizer step count and LR and
// the algorithm's compact_threshold replace theirs. Nothing is changed if it throws. When
// `algorithm` is null, saved DST state is ignored. Saved run settings are validated, not
// returned (decode_run_settings reads them).
template <class Optimizer, TrainableModel M>
TrainingProgress decode_training_state(std::span<const std::byte> bytes, std::string source, M& model,
                                       Optimizer& optimizer, dst::AlgorithmFor<M>* algorithm = nullptr) {
  using T = typename M::value_type;
  using Index = typename M::index_type;
  namespace ck = detail::ckpt;
  const binary::Container c = binary::parse_container(bytes, std::move(source));
  ck::check_types(c, binary::FileKind::training_state, ck::value_code<T>(), ck::index_code<Index>(), "model");
  std::size_t next = 0;
  ck::check_structure(ck::section(c, next++, ck::kModel, "model structure"), static_cast<const M&>(model));
  auto staged = ck::stage_parameters(c, next, model);
  const ck::OptimizerImage saved = ck::get_optimizer(ck::section(c, next++, ck::kOptimizer, "optimizer"), optimizer);
  ck::AlgorithmImage dst_state = ck::get_algorithm(ck::section(c, next++, ck::kDST, "DST algorithm"),
                                                   static_cast<const dst::AlgorithmFor<M>*>(algorithm));
  const TrainingProgress progress = ck::get_progress(ck::section(c, next++, ck::kProgress, "training progress"));
  if (next < c.sections.size() && c.sections[next].tag == ck::kSettings) ck::get_settings(c.reader(next++));
  if (next != c.sections.size())
    throw FormatError(detail::message(c.source, ": ", c.sections.size() - next, " unexpected sections after ",
                                      binary::tag_name(ck::kProgress)));

  // Everything is valid: commit with non-throwing moves.
  for (const auto& s : staged) s->commit();
  for (const SparseLayerRef<T, Index>& l : model.sparse_layers()) l.layer->transpose_cache().invalidate();
  optimizer.set_step_count(saved.step);
  optimizer.set_lr(saved.lr);
  if (algorithm) std::move(dst_state).restore(*algorithm);
  return progress;
}

// Writes encode_training_state's bytes to `path` atomically (io/atomic_file.hpp): a crash
// leaves the old file or the new one. Throws sprig::Error naming the call and errno's text
// when the file cannot be written; `path` is then unchanged.
template <class Optimizer, TrainableModel M>
void save_training_state(const std::filesystem::path& path, const M& model, const Optimizer& optimizer,
                         const TrainingProgress& progress, const dst::AlgorithmFor<M>* algorithm = nullptr,
                         const RunSettings& settings = {}) {
  const auto bytes = encode_training_state(model, optimizer, progress, algorithm, settings);
  detail::ckpt::write_file_atomically(path, bytes, "sprig::save_training_state");
}

// Reads `path` and restores it into the targets as decode_training_state does (all or
// nothing). Throws FormatError naming the file for a missing, unreadable or invalid file.
template <class Optimizer, TrainableModel M>
TrainingProgress load_training_state(const std::filesystem::path& path, M& model, Optimizer& optimizer,
                                     dst::AlgorithmFor<M>* algorithm = nullptr) {
  const auto bytes = detail::ckpt::read_file(path);
  return decode_training_state(std::span<const std::byte>(bytes), path.string(), model, optimizer, algorithm);
}

// The run settings of a training-state file in memory: empty when it has none (files written
// before settings existed, or saved without). Validates the container (every checksum) and
// the settings section, not the model's sections, and needs no model. O(file bytes).
// Throws FormatError naming the source, the section and the offset.
inline RunSettings decode_run_settings(std::span<const std::byte> bytes, std::string source) {
  namespace ck = detail::ckpt;
  const binary::Container c = binary::parse_container(bytes, std::move(source));
  binary::Reader header({}, c.source, "file header", 0);
  if (c.kind != binary::FileKind::training_state)
    header.fail_at(12, "this is ", ck::kind_name(c.kind), ", expected ",
                   ck::kind_name(binary::FileKind::training_state));
  for (std::size_t k = 0; k < c.sections.size(); ++k)
    if (c.sections[k].tag == ck::kSettings) {
      if (k + 1 != c.sections.size())
        c.reader(k).fail_at(c.sections[k].payload_offset - 24, "the run settings must be the last section");
      return ck::get_settings(c.reader(k));
    }
  return {};
}

// Reads the run settings of the training-state file at `path` (decode_run_settings). Throws
// FormatError naming the file for a missing, unreadable or invalid file.
inline RunSettings read_run_settings(const std::filesystem::path& path) {
  const auto bytes = detail::ckpt::read_file(path);
  return decode_run_settings(std::span<const std::byte>(bytes), path.string());
}

}  // namespace sprig
