// sprig/io/checkpoint.hpp — save and load a whole training state (model, optimizer, DST
// algorithm, progress), so that a run resumed from a checkpoint is bitwise the run that was
// never interrupted, for any TrainableModel (nn/model.hpp: Sequential, GPT, a user's
// class). (One PaddedCSR alone: io/padded_csr_file.hpp.)
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
// Files use the container of io/binary_format.hpp (magic "SPRIGCKP", version 1, value and
// index type codes in the header, every section CRC-32 checked); a sparse matrix is encoded
// as in a PaddedCSR file (io/padded_csr_file.hpp, section "CSR "). Sections and payloads
// (i64/u64/f64 little-endian; T values and Index columns at their own width):
//
//   training-state file (kind 2), sections in this order:
//     "MODL"  entry count u32; per entry: kind u8, in i64, out i64. A Sequential's entries
//             are its layers (kind 1 SparseLinear, 2 Linear, 3 ReLU, 4 GELU; in and out 0
//             for parameter-free layers); any other TrainableModel's (nn/model.hpp: GPT,
//             a user's class, a Sequential with extra layer types) are its parameters
//             (kind 5 sparse, 6 dense, 7 block-sparse; in = cols, out = rows)
//     per parameter, in the model's for_each_parameter order:
//       "SPAR"  decay u8, a sparse matrix (as "CSR "), state count u8, per state vector:
//               present u8 and, if present, T[nnz] (the live slots, in the matrix's order)
//       "DENS"  rows i64, cols i64, decay u8, values T[rows*cols], state count u8, per
//               state vector: present u8 and, if present, T[rows*cols]
//       "BSPR"  decay u8, a block-sparse matrix (as "BCSR" of a BlockPaddedCSR file), state
//               count u8, per state vector: present u8 and, if present, T[live blocks*R*C]
//     "OPTM"  kind u8 (1 SGD, 2 AdamW), step count i64, lr f64, option count u8, options
//             f64[] (SGD: momentum, weight_decay, nesterov; AdamW: beta1, beta2, eps,
//             weight_decay, bias_correction 0 per_slot / 1 global; files written before
//             bias_correction existed hold 4 and load into either policy, see adamw.hpp)
//     "DST "  present u8; if present: name (u32 length + bytes), delta_t i64, t_begin i64,
//             t_end i64, alpha f64, seed u64, compact_threshold f64, updates i64,
//             total_seconds f64, constant_fan_in u8, excluded count i64, excluded sparse
//             indices i64[] (ascending), configuration count i64, configuration f64[]
//             (SparsityAlgorithm::configuration; must equal the target's). Files written
//             before constant_fan_in end after total_seconds and leave the target's
//             constant_fan_in and exclusions as they are
//     "PROG"  step i64, epoch u64, batch i64, seed u64
//     "RUNS"  (optional: written only when the run gave settings; files from before it end
//             after "PROG") entry count u32; per entry: key, value (each u32 length +
//             bytes; keys non-empty, at most 256 bytes of printable ASCII, distinct; values
//             at most 65536 bytes), in the order given
//   Gradients are not saved: every step recomputes them before reading them (load zeroes
//   them). Per-slot state is stored for live slots only: the entries at padding and dead
//   slots carry no meaning (nn/parameter.hpp) and read back as 0.
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

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/padded_csr.hpp"
#include "../dst/algorithm.hpp"
#include "../kernels/transpose.hpp"
#include "../nn/sequential.hpp"
#include "../optim/adamw.hpp"
#include "../optim/sgd.hpp"
#include "atomic_file.hpp"
#include "binary_format.hpp"
#include "padded_csr_file.hpp"

namespace sprig {

// What defined a run, as the program names it: (key, value) pairs, in the program's order.
// Keys are non-empty, at most 256 bytes of printable ASCII (0x20-0x7E) and distinct; values
// are any bytes, at most 65536. The library stores and returns them; comparing them with a
// new run's options is the program's business.
using RunSettings = std::vector<std::pair<std::string, std::string>>;

// Where the training loop is: the next step to run and the data position. With the
// counter-based generators, (seed, epoch, batch) restores the data order exactly
// (data/batches.hpp: the order of an epoch is a function of seed and epoch).
struct TrainingProgress {
  std::int64_t step = 0;    // training steps completed (the t of the next step)
  std::uint64_t epoch = 0;  // current epoch
  std::int64_t batch = 0;   // next batch within the epoch
  std::uint64_t seed = 0;   // data-order seed
  bool operator==(const TrainingProgress&) const = default;
};

namespace detail::ckpt {

inline constexpr std::uint32_t kModel = binary::tag("MODL");
inline constexpr std::uint32_t kSparse = binary::tag("SPAR");
inline constexpr std::uint32_t kDense = binary::tag("DENS");
inline constexpr std::uint32_t kBlockSparse = binary::tag("BSPR");
inline constexpr std::uint32_t kOptimizer = binary::tag("OPTM");
inline constexpr std::uint32_t kDST = binary::tag("DST ");
inline constexpr std::uint32_t kProgress = binary::tag("PROG");
inline constexpr std::uint32_t kSettings = binary::tag("RUNS");

// ---- run settings -------------------------------------------------------------------------

inline constexpr std::size_t kMaxSettingKey = 256;
inline constexpr std::size_t kMaxSettingValue = 65536;

// Why `key` (entry k) cannot be stored beside `earlier` keys, or empty when it can. O(k) per
// entry: settings are a few dozen options.
inline std::string setting_key_problem(const RunSettings& s, std::size_t k) {
  const std::string& key = s[k].first;
  if (key.empty()) return message("setting ", k, " has an empty key");
  if (key.size() > kMaxSettingKey)
    return message("setting ", k, " has a key of ", key.size(), " bytes, more than ", kMaxSettingKey);
  for (const char ch : key)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7E)
      return message("setting ", k, "'s key has the non-printable byte ", int(static_cast<unsigned char>(ch)));
  for (std::size_t q = 0; q < k; ++q)
    if (s[q].first == key) return message("settings ", q, " and ", k, " have the same key '", key, "'");
  return {};
}

inline void put_settings(binary::Writer& w, const RunSettings& s) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (std::string problem = setting_key_problem(s, k); !problem.empty())
      throw ArgumentError(message("sprig::save_training_state: ", problem));
    if (s[k].second.size() > kMaxSettingValue)
      throw ArgumentError(message("sprig::save_training_state: setting '", s[k].first, "' has a value of ",
                                  s[k].second.size(), " bytes, more than ", kMaxSettingValue));
  }
  if (s.size() > std::numeric_limits<std::uint32_t>::max())
    throw ArgumentError(message("sprig::save_training_state: ", s.size(), " settings"));
  w.begin_section(kSettings);
  w.put(static_cast<std::uint32_t>(s.size()));
  for (const auto& [key, value] : s) {
    w.put_string(key);
    w.put_string(value);
  }
  w.end_section();
}

// The "RUNS" payload, validated as put_settings validates at save (FormatError instead).
inline RunSettings get_settings(binary::Reader r) {
  const std::int64_t at = r.offset();
  const auto n = r.get<std::uint32_t>("setting count");
  if (n > r.remaining() / 8)  // each entry holds two u32 lengths
    r.fail_at(at, "setting count ", n, " needs at least ", std::uint64_t{n} * 8, " bytes, the section has ",
              r.remaining(), " left");
  RunSettings s;
  s.reserve(n);
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::int64_t at_key = r.offset();
    s.emplace_back(r.get_string("setting key", kMaxSettingKey), std::string());
    if (std::string problem = setting_key_problem(s, k); !problem.empty()) r.fail_at(at_key, problem);
    s.back().second = r.get_string("setting value", kMaxSettingValue);
  }
  r.expect_end();
  return s;
}

// ---- per-slot state ---------------------------------------------------------------------

// State vectors as saved: present[k] says whether vector k existed (was non-empty).
template <Value T>
void get_states(binary::Reader& r, std::int64_t count, std::vector<AlignedVector<T>>& out, std::vector<bool>& present) {
  const auto n = r.get<std::uint8_t>("state count");
  out.assign(n, {});
  present.assign(n, false);
  for (std::uint8_t k = 0; k < n; ++k) {
    present[k] = r.get_bool("state present flag");
    if (present[k]) r.get_array<T>(count, out[k], "state values");
  }
}

// ---- model structure ----------------------------------------------------------------------

template <class L>
constexpr std::uint8_t layer_kind() {
  using T = typename L::value_type;
  if constexpr (requires { typename L::index_type; }) {
    static_assert(std::is_same_v<L, SparseLinear<T, typename L::index_type>>, "checkpoint: unknown layer type");
    return 1;
  } else if constexpr (std::is_same_v<L, Linear<T>>) {
    return 2;
  } else if constexpr (std::is_same_v<L, ReLU<T>>) {
    return 3;
  } else if constexpr (std::is_same_v<L, GELU<T>>) {
    return 4;
  } else {
    static_assert(sizeof(L) == 0, "checkpoint: unknown layer type; teach io/checkpoint.hpp its parameters");
    return 0;
  }
}
inline const char* layer_kind_name(std::uint8_t k) {
  switch (k) {
    case 1: return "SparseLinear";
    case 2: return "Linear";
    case 3: return "ReLU";
    case 4: return "GELU";
    case 5: return "sparse parameter";
    case 6: return "dense parameter";
    case 7: return "block-sparse parameter";
    default: return "unknown";
  }
}

// One entry of the "MODL" section: a layer of a Sequential, or a parameter of any other TrainableModel.
struct StructureEntry {
  std::uint8_t kind = 0;
  std::int64_t in = 0;
  std::int64_t out = 0;
};

template <class M>
inline constexpr bool is_sequential = false;
template <Value T, ColumnIndex Index>
inline constexpr bool is_sequential<Sequential<T, Index>> = true;

// What the "MODL" section records of a model, and the noun its messages use.
template <TrainableModel M>
std::vector<StructureEntry> structure(const M& model) {
  std::vector<StructureEntry> out;
  if constexpr (is_sequential<M>) {
    for (std::size_t k = 0; k < model.size(); ++k)
      std::visit(
          [&](const auto& l) {
            using L = std::remove_cvref_t<decltype(l)>;
            StructureEntry e{layer_kind<L>(), 0, 0};
            if constexpr (requires { l.in_features(); }) {
              e.in = l.in_features();
              e.out = l.out_features();
            }
            out.push_back(e);
          },
          model.layer(k));
  } else {
    model.for_each_parameter([&](const auto& p) {
      if constexpr (requires { p.entry_count(); })
        out.push_back({7, p.weight.cols(), p.weight.rows()});
      else if constexpr (requires { p.weight.storage_size(); })
        out.push_back({5, p.weight.cols(), p.weight.rows()});
      else
        out.push_back({6, p.cols, p.rows});
    });
  }
  return out;
}
template <class M>
constexpr const char* entry_noun() {
  return is_sequential<M> ? "layer" : "parameter";
}

// ---- optimizers -------------------------------------------------------------------------

struct OptimizerImage {
  std::uint8_t kind = 0;
  std::int64_t step = 0;
  double lr = 0;
  std::vector<double> options;
};

template <class O>
OptimizerImage describe(const O& o) {
  OptimizerImage d;
  d.step = o.step_count();
  d.lr = o.lr();
  using T = typename O::value_type;
  if constexpr (std::is_same_v<O, SGD<T>>) {
    d.kind = 1;
    d.options = {o.options().momentum, o.options().weight_decay, o.options().nesterov ? 1.0 : 0.0};
  } else if constexpr (std::is_same_v<O, AdamW<T>>) {
    d.kind = 2;
    d.options = {o.options().beta1, o.options().beta2, o.options().eps, o.options().weight_decay,
                 static_cast<double>(o.options().bias_correction)};
  } else {
    static_assert(sizeof(O) == 0, "checkpoint: unknown optimizer type; teach io/checkpoint.hpp its options");
  }
  return d;
}
inline const char* optimizer_name(std::uint8_t k) { return k == 1 ? "SGD" : k == 2 ? "AdamW" : "unknown"; }
inline const char* option_name(std::uint8_t kind, std::size_t k) {
  static constexpr const char* sgd[] = {"momentum", "weight_decay", "nesterov"};
  static constexpr const char* adamw[] = {"beta1", "beta2", "eps", "weight_decay", "bias_correction"};
  if (kind == 1 && k < 3) return sgd[k];
  if (kind == 2 && k < 5) return adamw[k];
  return "option";
}

// ---- staging for the model ----------------------------------------------------------------

template <Value T, ColumnIndex Index>
struct StagedSparse {
  PaddedCSR<T, Index> weight;
  AlignedVector<T> grad;
  std::vector<AlignedVector<T>> state;
  bool decay = true;
};
template <Value T>
struct StagedDense {
  AlignedVector<T> value;
  std::vector<AlignedVector<T>> state;
  bool decay = true;
};

}  // namespace detail::ckpt

// ---- training state ---------------------------------------------------------------------

// The bytes of a training-state file (format at the top). `algorithm` may be null (no DST).
// O(model bytes); reads the model only (safe alongside other readers); throws only
// std::bad_alloc. The same state gives the same bytes.
template <class Optimizer, TrainableModel M>
std::vector<std::byte> encode_training_state(const M& model, const Optimizer& optimizer, const TrainingProgress& progress,
                                             const dst::AlgorithmFor<M>* algorithm = nullptr,
                                             const RunSettings& settings = {}) {
  using T = typename M::value_type;
  using Index = typename M::index_type;
  namespace ck = detail::ckpt;
  binary::Writer w;
  w.header(binary::FileKind::training_state, ck::value_code<T>(), ck::index_code<Index>());

  const std::vector<ck::StructureEntry> entries = ck::structure(model);
  w.begin_section(ck::kModel);
  w.put(static_cast<std::uint32_t>(entries.size()));
  for (const ck::StructureEntry& e : entries) {
    w.put(e.kind);
    w.put(e.in);
    w.put(e.out);
  }
  w.end_section();

  auto put_states = [&](const auto& states, auto&& put_one) {
    w.put(static_cast<std::uint8_t>(states.size()));
    for (const auto& s : states) {
      w.put_bool(!s.empty());
      if (!s.empty()) put_one(s);
    }
  };
  model.for_each_parameter([&](const auto& p) {
    p.check_aligned("sprig::save_training_state");
    if (p.state.size() > 255) throw ArgumentError("sprig::save_training_state: more than 255 state vectors");
    if constexpr (requires { p.entry_count(); }) {
      w.begin_section(ck::kBlockSparse);
      w.put_bool(p.decay);
      ck::put_block_sparse(w, p.weight);
      put_states(p.state, [&](const AlignedVector<T>& s) { ck::put_block_live(w, p.weight.pattern(), s, p.kBlockSize); });
      w.end_section();
    } else if constexpr (requires { p.weight.storage_size(); }) {
      w.begin_section(ck::kSparse);
      w.put_bool(p.decay);
      ck::put_sparse(w, p.weight);
      put_states(p.state, [&](const AlignedVector<T>& s) { ck::put_live(w, p.weight, s); });
      w.end_section();
    } else {
      w.begin_section(ck::kDense);
      w.put(p.rows);
      w.put(p.cols);
      w.put_bool(p.decay);
      w.put_array(std::span<const T>(p.value));
      put_states(p.state, [&](const AlignedVector<T>& s) { w.put_array(std::span<const T>(s)); });
      w.end_section();
    }
  });

  const ck::OptimizerImage o = ck::describe(optimizer);
  w.begin_section(ck::kOptimizer);
  w.put(o.kind);
  w.put(o.step);
  w.put(o.lr);
  w.put(static_cast<std::uint8_t>(o.options.size()));
  w.put_array(std::span<const double>(o.options));
  w.end_section();

  w.begin_section(ck::kDST);
  w.put_bool(algorithm != nullptr);
  if (algorithm) {
    const auto& s = algorithm->schedule();
    w.put_string(algorithm->name());
    w.put(s.delta_t);
    w.put(s.t_begin);
    w.put(s.t_end);
    w.put(s.alpha);
    w.put(algorithm->seed());
    w.put(algorithm->compact_threshold);
    w.put(algorithm->updates());
    w.put(algorithm->total_seconds());
    w.put_bool(algorithm->constant_fan_in);
    const auto& excluded = algorithm->excluded_layers();
    w.put(static_cast<std::int64_t>(excluded.size()));
    w.put_array(std::span<const std::int64_t>(excluded));
    const std::vector<double> config = algorithm->configuration();
    w.put(static_cast<std::int64_t>(config.size()));
    w.put_array(std::span<const double>(config));
  }
  w.end_section();

  w.begin_section(ck::kProgress);
  w.put(progress.step);
  w.put(progress.epoch);
  w.put(progress.batch);
  w.put(progress.seed);
  w.end_section();
  if (!settings.empty()) ck::put_settings(w, settings);
  return w.finish();
}

// Restores model, optimizer and (when given) algorithm from a training-state file in
// memory and returns the saved progress. The targets must be built like the saved run
// (same layers and shapes, optimizer kind and options, DST name, schedule and seed): the
// file's weights, topology, per-slot state, decay flags, optimizer step count and LR and
// the algorithm's compact_threshold replace theirs. Nothing is changed if it throws. When
// `algorithm` is null, saved DST state is ignored.
template <class Optimizer, TrainableModel M>
TrainingProgress decode_training_state(std::span<const std::byte> bytes, std::string source, M& model,
                                       Optimizer& optimizer, dst::AlgorithmFor<M>* algorithm = nullptr) {
  using T = typename M::value_type;
  using Index = typename M::index_type;
  namespace ck = detail::ckpt;
  const binary::Container c = binary::parse_container(bytes, std::move(source));
  ck::check_types(c, binary::FileKind::training_state, ck::value_code<T>(), ck::index_code<Index>(), "model");
  std::size_t next = 0;
  const M& target = model;
  constexpr const char* noun = ck::entry_noun<M>();

  // Model structure.
  {
    binary::Reader r = ck::section(c, next++, ck::kModel, "model structure");
    const std::vector<ck::StructureEntry> want = ck::structure(target);
    const std::int64_t at = r.offset();
    const auto count = r.get<std::uint32_t>("layer count");
    if (count != want.size())
      r.fail_at(at, "shape mismatch: the checkpoint has ", count, " ", noun, "s, the model has ", want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      const std::int64_t at_entry = r.offset();
      const auto kind = r.get<std::uint8_t>("layer kind");
      const auto in = r.get<std::int64_t>("in features");
      const auto out = r.get<std::int64_t>("out features");
      if (kind != want[k].kind)
        r.fail_at(at_entry, noun, " ", k, " is a ", ck::layer_kind_name(kind), " in the checkpoint but a ",
                  ck::layer_kind_name(want[k].kind), " in the model");
      if (in != want[k].in || out != want[k].out)
        r.fail_at(at_entry, "shape mismatch: ", noun, " ", k, " (", ck::layer_kind_name(kind), ") is ", out, "x", in,
                  " (out x in) in the checkpoint but ", want[k].out, "x", want[k].in, " in the model");
    }
    r.expect_end();
  }

  // Parameters, decoded into temporaries.
  std::vector<ck::StagedSparse<T, Index>> sparse;
  std::vector<ck::StagedDense<T>> dense;
  std::vector<std::shared_ptr<void>> blocks;  // staged BlockSparseParameters, each of its layer's type
  std::size_t k = 0;  // the parameter's index, for messages
  target.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.entry_count(); }) {
      using P = std::remove_cvref_t<decltype(p)>;
      using W = decltype(P::weight);
      binary::Reader r = ck::section(c, next++, ck::kBlockSparse, "a block-sparse parameter");
      auto s = std::make_shared<P>();
      s->decay = r.get_bool("decay flag");
      const std::int64_t at = r.offset();
      const auto image = ck::get_block_sparse<T, Index, W::kBlockRows, W::kBlockCols>(r);
      if (image.rows != p.weight.rows() || image.cols != p.weight.cols())
        r.fail_at(at, "shape mismatch: parameter ", k, " is a ", image.rows, "x", image.cols,
                  " block-sparse weight in the checkpoint but ", p.weight.rows(), "x", p.weight.cols(), " in the model");
      std::vector<AlignedVector<T>> packed;
      std::vector<bool> present;
      ck::get_states<T>(r, image.pattern.nnz * P::kBlockSize, packed, present);
      r.expect_end();
      s->weight = ck::build_block<T, Index, W::kBlockRows, W::kBlockCols>(image);
      s->grad.assign(static_cast<std::size_t>(s->entry_count()), T(0));
      s->state.resize(packed.size());
      for (std::size_t q = 0; q < packed.size(); ++q)
        if (present[q]) s->state[q] = ck::scatter_block_live(s->weight.pattern(), packed[q], P::kBlockSize);
      blocks.push_back(std::move(s));
    } else if constexpr (requires { p.weight.storage_size(); }) {
      binary::Reader r = ck::section(c, next++, ck::kSparse, "a sparse parameter");
      ck::StagedSparse<T, Index> s;
      s.decay = r.get_bool("decay flag");
      const std::int64_t at = r.offset();
      const auto image = ck::get_sparse<T, Index>(r);
      if (image.rows != p.weight.rows() || image.cols != p.weight.cols())
        r.fail_at(at, "shape mismatch: parameter ", k, " is a ", image.rows, "x", image.cols,
                  " sparse weight in the checkpoint but ", p.weight.rows(), "x", p.weight.cols(), " in the model");
      std::vector<AlignedVector<T>> packed;
      std::vector<bool> present;
      ck::get_states<T>(r, image.nnz, packed, present);
      r.expect_end();
      s.weight = ck::build(image);
      s.grad.assign(static_cast<std::size_t>(s.weight.storage_size()), T(0));
      s.state.resize(packed.size());
      for (std::size_t q = 0; q < packed.size(); ++q)
        if (present[q]) s.state[q] = ck::scatter_live(s.weight, packed[q]);
      sparse.push_back(std::move(s));
    } else {
      binary::Reader r = ck::section(c, next++, ck::kDense, "a dense parameter");
      const std::int64_t at = r.offset();
      const auto rows = r.get<std::int64_t>("rows");
      const auto cols = r.get<std::int64_t>("cols");
      if (rows != p.rows || cols != p.cols)
        r.fail_at(at, "shape mismatch: parameter ", k, " is a ", rows, "x", cols,
                  " dense parameter in the checkpoint but ", p.rows, "x", p.cols, " in the model");
      ck::StagedDense<T> s;
      s.decay = r.get_bool("decay flag");
      r.get_array<T>(p.size(), s.value, "values");
      std::vector<bool> present;
      ck::get_states<T>(r, p.size(), s.state, present);
      r.expect_end();
      dense.push_back(std::move(s));
    }
    ++k;
  });

  // Optimizer.
  const ck::OptimizerImage mine = ck::describe(optimizer);
  ck::OptimizerImage saved;
  {
    binary::Reader r = ck::section(c, next++, ck::kOptimizer, "optimizer");
    const std::int64_t at = r.offset();
    saved.kind = r.get<std::uint8_t>("optimizer kind");
    if (saved.kind != mine.kind)
      r.fail_at(at, "the checkpoint's optimizer is ", ck::optimizer_name(saved.kind), ", the target is ",
                ck::optimizer_name(mine.kind));
    const std::int64_t at_step = r.offset();
    saved.step = r.get<std::int64_t>("step count");
    if (saved.step < 0) r.fail_at(at_step, "step count ", saved.step, " < 0");
    const std::int64_t at_lr = r.offset();
    saved.lr = r.get<double>("lr");
    if (!(saved.lr >= 0.0) || !std::isfinite(saved.lr)) r.fail_at(at_lr, "lr ", saved.lr, " is not a finite value >= 0");
    const std::int64_t at_n = r.offset();
    const auto n = r.get<std::uint8_t>("option count");
    // AdamW files from before bias_correction: its 4 other options, any policy
    const bool legacy_adamw = saved.kind == 2 && n == 4 && mine.options.size() == 5;
    if (std::size_t{n} != mine.options.size() && !legacy_adamw)
      r.fail_at(at_n, "the ", ck::optimizer_name(saved.kind), " section has ", int(n), " options, expected ",
                mine.options.size());
    for (std::size_t q = 0; q < n; ++q) {
      const std::int64_t at_o = r.offset();
      const auto v = r.get<double>("option");
      if (std::bit_cast<std::uint64_t>(v) != std::bit_cast<std::uint64_t>(mine.options[q]))
        r.fail_at(at_o, "optimizer option ", ck::option_name(saved.kind, q), " is ", v, " in the checkpoint but ",
                  mine.options[q], " in the target optimizer (build it with the saved options)");
    }
    r.expect_end();
  }

  // DST algorithm.
  double compact_threshold = 0;
  std::int64_t dst_updates = 0;
  double dst_seconds = 0.0;
  bool dst_extras = false, dst_fan_in = false;
  std::vector<std::int64_t> dst_excluded;
  {
    binary::Reader r = ck::section(c, next++, ck::kDST, "DST algorithm");
    const bool present = r.get_bool("DST present flag");
    if (!present && algorithm)
      r.fail("the checkpoint has no DST algorithm state but a ", algorithm->name(), " algorithm was given");
    if (present) {
      const std::int64_t at = r.offset();
      const std::string name = r.get_string("algorithm name", 64);
      dst::UpdateSchedule s;
      s.delta_t = r.get<std::int64_t>("delta_t");
      s.t_begin = r.get<std::int64_t>("t_begin");
      s.t_end = r.get<std::int64_t>("t_end");
      s.alpha = r.get<double>("alpha");
      const auto seed = r.get<std::uint64_t>("seed");
      const std::int64_t at_ct = r.offset();
      compact_threshold = r.get<double>("compact_threshold");
      dst_updates = r.get_count("updates");
      dst_seconds = r.get<double>("total_seconds");
      if (!(dst_seconds >= 0.0) || !std::isfinite(dst_seconds))
        r.fail_at(r.offset() - 8, "total_seconds ", dst_seconds, " is not a finite non-negative time");
      // files from before these fields end here: the target keeps its own settings
      if (r.remaining() > 0) {
        dst_extras = true;
        dst_fan_in = r.get_bool("constant_fan_in");
        const std::int64_t at_ex = r.offset();
        r.get_array<std::int64_t>(r.get_count("excluded layer count"), dst_excluded, "excluded layers");
        for (std::size_t q = 0; q < dst_excluded.size(); ++q)
          if (dst_excluded[q] < 0 || (q > 0 && dst_excluded[q] <= dst_excluded[q - 1]))
            r.fail_at(at_ex, "excluded layers are not distinct non-negative ascending indices");
        const std::int64_t at_cfg = r.offset();
        std::vector<double> config;
        r.get_array<double>(r.get_count("configuration count"), config, "configuration");
        if (algorithm) {
          const std::vector<double> mine = algorithm->configuration();
          bool same = config.size() == mine.size();
          for (std::size_t q = 0; same && q < config.size(); ++q)
            same = std::bit_cast<std::uint64_t>(config[q]) == std::bit_cast<std::uint64_t>(mine[q]);
          if (!same)
            r.fail_at(at_cfg, "the DST configuration differs: the checkpoint's ", name, " has ", config.size(),
                      " configuration values, the target's ", mine.size(),
                      " (or other values; build the algorithm with the saved options)");
        }
      }
      r.expect_end();
      if (algorithm) {
        const auto& m = algorithm->schedule();
        if (name != algorithm->name())
          r.fail_at(at, "the checkpoint's DST algorithm is '", name, "', the target is '", algorithm->name(), "'");
        if (s.delta_t != m.delta_t || s.t_begin != m.t_begin || s.t_end != m.t_end ||
            std::bit_cast<std::uint64_t>(s.alpha) != std::bit_cast<std::uint64_t>(m.alpha))
          r.fail_at(at, "the DST schedule differs: checkpoint delta_t ", s.delta_t, ", t_begin ", s.t_begin, ", t_end ",
                    s.t_end, ", alpha ", s.alpha, "; target ", m.delta_t, ", ", m.t_begin, ", ", m.t_end, ", ", m.alpha);
        if (seed != algorithm->seed())
          r.fail_at(at, "the DST seed differs: checkpoint ", seed, ", target ", algorithm->seed());
        if (!std::isfinite(compact_threshold)) r.fail_at(at_ct, "compact_threshold ", compact_threshold, " is not finite");
      }
    } else {
      r.expect_end();
    }
  }

  // Progress.
  TrainingProgress progress;
  {
    binary::Reader r = ck::section(c, next++, ck::kProgress, "training progress");
    progress.step = r.get_count("step");
    progress.epoch = r.get<std::uint64_t>("epoch");
    progress.batch = r.get_count("batch");
    progress.seed = r.get<std::uint64_t>("seed");
    r.expect_end();
  }
  // Run settings (optional): validated, not restored (read_run_settings returns them).
  if (next < c.sections.size() && c.sections[next].tag == ck::kSettings) ck::get_settings(c.reader(next++));
  if (next != c.sections.size())
    throw FormatError(detail::message(c.source, ": ", c.sections.size() - next, " unexpected sections after ",
                                      binary::tag_name(ck::kProgress)));

  // Everything is valid: commit with non-throwing moves.
  std::size_t si = 0, di = 0, bi = 0;
  model.for_each_parameter([&](auto& p) {
    if constexpr (requires { p.entry_count(); }) {
      p = std::move(*static_cast<std::remove_cvref_t<decltype(p)>*>(blocks[bi++].get()));
    } else if constexpr (requires { p.weight.storage_size(); }) {
      auto& s = sparse[si++];
      p.weight = std::move(s.weight);
      p.grad = std::move(s.grad);
      p.state = std::move(s.state);
      p.decay = s.decay;
    } else {
      auto& s = dense[di++];
      p.value = std::move(s.value);
      std::fill(p.grad.begin(), p.grad.end(), T(0));
      p.state = std::move(s.state);
      p.decay = s.decay;
    }
  });
  for (const SparseLayerRef<T, Index>& l : model.sparse_layers()) l.layer->transpose_cache().invalidate();
  optimizer.set_step_count(saved.step);
  optimizer.set_lr(saved.lr);
  if (algorithm) {
    algorithm->compact_threshold = compact_threshold;
    algorithm->restore_counters(dst_updates, dst_seconds);
    if (dst_extras) {
      algorithm->constant_fan_in = dst_fan_in;
      algorithm->set_excluded_layers(std::move(dst_excluded));  // validated above: cannot throw
    }
  }
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
    header.fail_at(12, "this is ", ck::kind_name(c.kind), ", expected ", ck::kind_name(binary::FileKind::training_state));
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
