// The markdown report: the machine and versions, then each section's tables and the targets.

#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench_http.hpp"
#include "bench_options.hpp"
#include "bench_scenarios.hpp"

namespace bench {

std::string load_average();

// "2026-11-30 22:31 UTC": when a run started, for the report's reader.
std::string utc_now();

void print_machine(const options& o, const std::string& started, const std::string& load_at_start);

void print_unready(const std::vector<reboot_sample>& reboots,
                   const std::vector<sigterm_sample>& sigterms);

void print_hold(const options& o,
                const std::vector<std::pair<hold_scenario, std::vector<reboot_sample>>>& runs);

void print_startup_idle(const options& o, const std::vector<startup_sample>& off,
                        const std::vector<startup_sample>& lock,
                        const std::vector<idle_sample>& idle, const http_report* http,
                        std::vector<std::string>& summary);

void print_http(const options& o, const http_report& r, std::vector<std::string>& summary);

void print_upstream(const upstream_report& r, std::vector<std::string>& summary);

}  // namespace bench
