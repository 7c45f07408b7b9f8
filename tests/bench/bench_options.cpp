#include "bench_options.hpp"

#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace bench {

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "bench_driver: " << why << "\n"
            << "usage: bench_driver [--reboots=N] [--sigterms=N] [--starts=N] [--idle-seconds=N]\n"
            << "  [--drain=DURATION] [--wrk-duration=SECONDS] [--wrk-connections=N]\n"
            << "  [--wrk-threads=N] [--wrk-rounds=N] [--crashes=N] [--hangs=N]\n"
            << "  [--sections=reboot,sigterm,startup,idle,http,upstream]\n"
            << "  [--build-info=TEXT] [--shim-variant=LABEL=PATH ...] [--state-dir=PATH]\n";
  std::exit(2);
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) usage("unknown argument " + arg);
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    auto number = [&] {
      try {
        const int v = std::stoi(value);
        if (v < 1) throw std::out_of_range("not positive");
        return v;
      } catch (const std::exception&) {
        usage(key + " needs a positive number");
      }
    };
    if (key == "--reboots") {
      o.reboots = number();
    } else if (key == "--sigterms") {
      o.sigterms = number();
    } else if (key == "--starts") {
      o.starts = number();
    } else if (key == "--idle-seconds") {
      o.idle_seconds = number();
    } else if (key == "--drain") {
      o.drain = value;
    } else if (key == "--wrk-duration") {
      o.wrk_seconds = number();
    } else if (key == "--wrk-connections") {
      o.wrk_connections = number();
    } else if (key == "--wrk-threads") {
      o.wrk_threads = number();
    } else if (key == "--wrk-rounds") {
      o.wrk_rounds = number();
    } else if (key == "--crashes") {
      o.crashes = number();
    } else if (key == "--hangs") {
      o.hangs = number();
    } else if (key == "--build-info") {
      o.build_info = value;
    } else if (key == "--shim-variant") {
      const auto sep = value.find('=');
      if (sep == std::string::npos || sep == 0) usage("--shim-variant needs LABEL=PATH");
      o.shim_variants.emplace_back(value.substr(0, sep), value.substr(sep + 1));
    } else if (key == "--state-dir") {
      if (!value.starts_with('/')) usage("--state-dir needs an absolute path");
      o.state_dir = value;
    } else if (key == "--sections") {
      o.sections.clear();
      std::stringstream in(value);
      for (std::string s; std::getline(in, s, ',');) {
        if (s != "reboot" && s != "sigterm" && s != "startup" && s != "idle" && s != "http" &&
            s != "upstream") {
          usage("unknown section " + s);
        }
        o.sections.insert(s);
      }
    } else {
      usage("unknown argument " + arg);
    }
  }
  return o;
}

std::uint64_t duration_us(const std::string& text) {
  std::size_t pos = 0;
  const double v = std::stod(text, &pos);
  const std::string unit = text.substr(pos);
  if (unit == "ms") return static_cast<std::uint64_t>(v * 1000);
  if (unit == "s") return static_cast<std::uint64_t>(v * 1'000'000);
  usage("--drain takes ms or s, e.g. 500ms");
}

}  // namespace bench
