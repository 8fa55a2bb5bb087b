// dst_compare — Static vs SET vs RigL vs SNFS (and GraNet, gmp, any of them with constant fan-in
// as NAME-fanin) on Fashion-MNIST at several sparsities and seeds.
//
// Each run is the `fashion_mnist` example in its own process (so runs cannot influence each
// other and each one's memory is its own), started as
//   fashion_mnist --algorithm A --sparsity S --seed N --epochs E --csv OUT/A_S_N.csv [extra]
// and read back from its RESULT line and curve CSV. Prints a table (mean +- std of the test
// accuracy over seeds and the 95% interval of that mean, seconds per epoch, seconds spent in topology updates per run) and writes
// OUT/dst_compare.md, OUT/dst_compare.csv and, when gnuplot is installed, OUT/dst_compare.png
// with the mean test-accuracy curves.
//
//   dst_compare --epochs 5 --seeds 3 --out examples/results/dst
#include <CLI/CLI.hpp>

#include "cli_checks.hpp"
#include "guarded_main.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;

namespace {

struct Run {
  std::map<std::string, double> result;  // RESULT key=value
  std::vector<double> test_accuracy;     // per epoch
  std::vector<double> epoch_seconds;     // per epoch
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a command, returns its stdout; throws if it fails.
std::string capture(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("dst_compare: cannot start: " + command);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  if (status != 0)
    throw std::runtime_error("dst_compare: command failed (status " + std::to_string(status) + "): " + command);
  return out;
}

std::map<std::string, double> parse_result(const std::string& output, const std::string& command) {
  const auto at = output.rfind("RESULT ");
  if (at == std::string::npos) throw std::runtime_error("dst_compare: no RESULT line from: " + command);
  std::istringstream line(output.substr(at + 7, output.find('\n', at) - at - 7));
  std::map<std::string, double> kv;
  for (std::string field; line >> field;) {
    const auto eq = field.find('=');
    if (eq != std::string::npos) kv[field.substr(0, eq)] = std::stod(field.substr(eq + 1));
  }
  return kv;
}

// Reads the per-epoch columns test_accuracy and epoch_seconds of a fashion_mnist curve CSV.
void read_curves(const fs::path& path, Run& run) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("dst_compare: missing curve file " + path.string());
  std::string header;
  std::getline(in, header);
  std::vector<std::string> names;
  std::stringstream hs(header);
  for (std::string h; std::getline(hs, h, ',');) names.push_back(h);
  for (std::string row; std::getline(in, row);) {
    std::stringstream rs(row);
    std::size_t k = 0;
    for (std::string cell; std::getline(rs, cell, ','); ++k) {
      if (k >= names.size()) break;
      if (names[k] == "test_accuracy") run.test_accuracy.push_back(std::stod(cell));
      if (names[k] == "epoch_seconds") run.epoch_seconds.push_back(std::stod(cell));
    }
  }
}

struct Stats {
  double mean = 0, std = 0;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(s.std / static_cast<double>(v.size() - 1)) : 0.0;  // sample std
  return s;
}

// Half-width of the two-sided 95% confidence interval of a mean of n samples with sample
// standard deviation sd (Student's t with n - 1 degrees of freedom; 0 for n < 2).
double ci95_half_width(std::size_t n, double sd) {
  static constexpr double t975[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                    2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086};
  if (n < 2) return 0.0;
  const double t = n - 1 <= std::size(t975) ? t975[n - 2] : 1.96;
  return t * sd / std::sqrt(static_cast<double>(n));
}

std::string fmt(const char* f, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

}  // namespace

namespace {

int program(int argc, char** argv) {
  CLI::App app{"Static vs SET vs RigL vs SNFS on Fashion-MNIST (each run is a fashion_mnist process)"};
  std::vector<std::string> algorithms{"static", "set", "rigl", "snfs"};
  std::vector<double> sparsities{0.90, 0.95, 0.98};
  int seeds = 3;
  int epochs = 5;
  std::string out_dir = "dst_compare_out";
  std::string binary = (fs::path(argv[0]).parent_path() / "fashion_mnist").string();
  std::vector<std::string> extra;
  // NAME or NAME-fanin, NAME one of fashion_mnist's --algorithm values that train a sparse model
  const CLI::Validator algorithm_name(
      [](std::string& a) -> std::string {
        const std::string base =
            a.size() > 6 && a.compare(a.size() - 6, 6, "-fanin") == 0 ? a.substr(0, a.size() - 6) : a;
        for (const char* known : {"static", "set", "rigl", "snfs", "granet", "gmp"})
          if (base == known) return {};
        return "'" + a + "' is not one of static, set, rigl, snfs, granet, gmp (each optionally NAME-fanin)";
      },
      "NAME[-fanin]");
  app.add_option("--algorithms", algorithms,
                 "Algorithms to compare: fashion_mnist's --algorithm names; NAME-fanin adds --constant-fan-in")
      ->delimiter(',')
      ->check(algorithm_name)
      ->capture_default_str();
  app.add_option("--sparsities", sparsities, "Hidden-layer sparsities")
      ->delimiter(',')
      ->check(examples::in_range(0.0, 0.9999))
      ->capture_default_str();
  app.add_option("--seeds", seeds, "Seeds per configuration (1, 2, ...)")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--epochs", epochs, "Epochs per run")->check(examples::positive())->capture_default_str();
  app.add_option("--out", out_dir, "Output folder (curves, table, plot)")->capture_default_str();
  app.add_option("--fashion-mnist", binary, "Path of the fashion_mnist example")->capture_default_str();
  app.add_option("--extra", extra, "Extra arguments passed to every run, e.g. --extra=--threads=2")
      ->allow_extra_args(false);
  examples::name_failures(app, "dst_compare");
  CLI11_PARSE(app, argc, argv);

  // Every check before the first run: a sweep takes hours.
  if (!fs::is_regular_file(binary) || ::access(binary.c_str(), X_OK) != 0)
    throw std::runtime_error("dst_compare: --fashion-mnist " + binary + ": no such executable");
  examples::require_writable_dir<std::runtime_error>("dst_compare", "--out", out_dir);
  std::ofstream csv(fs::path(out_dir) / "dst_compare.csv");
  csv << "algorithm,sparsity,seed,test_accuracy,ms_per_step,mean_epoch_seconds,topology_seconds,weight_bytes\n";
  // results[sparsity index][algorithm]
  std::vector<std::map<std::string, std::vector<Run>>> results(sparsities.size());
  for (std::size_t si = 0; si < sparsities.size(); ++si)
    for (const auto& algo : algorithms)
      for (int seed = 1; seed <= seeds; ++seed) {
        const std::string tag = algo + "_" + fmt("%.2f", sparsities[si]) + "_" + std::to_string(seed);
        const fs::path curves = fs::path(out_dir) / (tag + ".csv");
        // "<algorithm>-fanin": that algorithm with constant fan-in
        const bool fan_in = algo.size() > 6 && algo.compare(algo.size() - 6, 6, "-fanin") == 0;
        const std::string base = fan_in ? algo.substr(0, algo.size() - 6) : algo;
        std::string cmd = quote(binary) + " --algorithm " + base + (fan_in ? " --constant-fan-in" : "") +
                          " --sparsity " + fmt("%.4f", sparsities[si]) + " --seed " + std::to_string(seed) +
                          " --epochs " + std::to_string(epochs) + " --csv " + quote(curves.string());
        for (const auto& e : extra) cmd += " " + quote(e);
        cmd += " 2>/dev/null";
        std::fprintf(stderr, "[dst_compare] %s\n", tag.c_str());
        Run run;
        run.result = parse_result(capture(cmd), cmd);
        read_curves(curves, run);
        const double epoch_s = stats(run.epoch_seconds).mean;
        csv << algo << ',' << sparsities[si] << ',' << seed << ',' << run.result["test_accuracy"] << ','
            << run.result["ms_per_step"] << ',' << epoch_s << ',' << run.result["topology_seconds"] << ','
            << static_cast<long long>(run.result["weight_bytes"]) << '\n';
        csv.flush();
        results[si][algo].push_back(std::move(run));
      }

  std::ostringstream table;
  std::string extras;
  for (const auto& e : extra) extras += (extras.empty() ? "" : " ") + e;
  table << "fashion_mnist --epochs " << epochs << (extras.empty() ? "" : " ") << extras << "\n\n"
        << "| sparsity | algorithm | test accuracy (mean +- std, " << seeds << " seeds) | 95% interval of the mean | "
        << "s/epoch | topology s/run | topology share |\n|---|---|---|---|---|---|---|\n";
  for (std::size_t si = 0; si < sparsities.size(); ++si)
    for (const auto& algo : algorithms) {
      std::vector<double> acc, epoch, topo, share;
      for (auto& r : results[si][algo]) {
        acc.push_back(100.0 * r.result["test_accuracy"]);
        const double e = stats(r.epoch_seconds).mean;
        epoch.push_back(e);
        topo.push_back(r.result["topology_seconds"]);
        share.push_back(r.result["topology_seconds"] / std::max(1e-9, e * static_cast<double>(r.epoch_seconds.size())));
      }
      const Stats a = stats(acc);
      const double h = ci95_half_width(acc.size(), a.std);
      table << "| " << fmt("%.0f%%", 100 * sparsities[si]) << " | " << algo << " | "
            << fmt("%.2f +- %.2f %%", a.mean, a.std) << " | " << fmt("[%.2f, %.2f]", a.mean - h, a.mean + h) << " | "
            << fmt("%.2f", stats(epoch).mean) << " | " << fmt("%.3f", stats(topo).mean) << " | "
            << fmt("%.2f%%", 100 * stats(share).mean) << " |\n";
    }
  std::printf("%s", table.str().c_str());
  std::ofstream(fs::path(out_dir) / "dst_compare.md") << table.str();

  // mean test-accuracy curve per (sparsity, algorithm) for gnuplot: one data block each
  const fs::path data = fs::path(out_dir) / "dst_compare_curves.dat";
  {
    std::ofstream d(data);
    for (std::size_t si = 0; si < sparsities.size(); ++si)
      for (const auto& algo : algorithms) {
        d << "# " << algo << " " << sparsities[si] << "\n";
        const auto& runs = results[si][algo];
        for (std::size_t e = 0; !runs.empty() && e < runs.front().test_accuracy.size(); ++e) {
          std::vector<double> v;
          for (auto& r : runs)
            if (e < r.test_accuracy.size()) v.push_back(100.0 * r.test_accuracy[e]);
          d << e + 1 << ' ' << stats(v).mean << '\n';
        }
        d << "\n\n";
      }
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const fs::path script = fs::path(out_dir) / "dst_compare.gp";
    std::ofstream gp(script);
    gp << "set terminal pngcairo size " << 420 * sparsities.size() << ",380 noenhanced\n"
       << "set output \"" << (fs::path(out_dir) / "dst_compare.png").string() << "\""
       << "\nset multiplot layout 1," << sparsities.size() << "\nset grid\nset key bottom right\n"
       << "set xlabel 'epoch'\nset ylabel 'test accuracy (%)'\n";
    std::size_t block = 0;
    for (std::size_t si = 0; si < sparsities.size(); ++si) {
      gp << "set title 'sparsity " << fmt("%.0f%%", 100 * sparsities[si]) << "'\nplot ";
      for (std::size_t a = 0; a < algorithms.size(); ++a, ++block)
        gp << (a ? ", " : "") << "\"" << data.string() << "\" index " << block << " with linespoints title '"
           << algorithms[a] << "'";
      gp << "\n";
    }
    gp << "unset multiplot\n";
    gp.close();
    if (std::system(("gnuplot " + quote(script.string())).c_str()) != 0)
      std::fprintf(stderr, "dst_compare: gnuplot failed; the data is in %s\n", data.c_str());
  }
  return 0;
}

}  // namespace

// Nothing escapes: every exception is reported and exits 1 (examples/guarded_main.hpp).
int main(int argc, char** argv) {
  return examples::guarded_main("dst_compare", [&] { return program(argc, argv); });
}
