#include "bus_config.hpp"

#include <fmt/core.h>

#include <array>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace sandbox {

namespace {

std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string without_comments(const std::string& xml) {
  static const std::regex comment(R"(<!--[\s\S]*?-->)");
  return std::regex_replace(xml, comment, "");
}

// Elements a sandbox bus must not take from the machine: they would listen, write or start
// something outside the sandbox.
constexpr std::array<std::string_view, 7> kMachineElements{
    "<listen", "<pidfile", "<servicehelper", "<servicedir", "<standard_system_servicedirs",
    "<fork",   "<syslog"};

void refuse_machine_elements(const std::string& xml, const std::filesystem::path& where) {
  for (auto element : kMachineElements) {
    if (xml.find(element) != std::string::npos) {
      throw std::runtime_error(
          fmt::format("{} has {}...>, which a sandbox bus cannot take from the machine",
                      where.string(), element));
    }
  }
}

// Included policy files (system.d/*.conf, system-local.conf): only policies are expected there.
void check_included(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".conf") check_included(entry.path());
    }
    return;
  }
  if (!std::filesystem::exists(path, ec)) return;  // ignore_missing, or an empty directory
  const std::string xml = without_comments(read_whole_file(path));
  refuse_machine_elements(xml, path);
  if (xml.find("<include") != std::string::npos) {
    throw std::runtime_error(
        fmt::format("{} includes further files; the sandbox does not follow them", path.string()));
  }
}

}  // namespace

std::string allow_all_bus_config(const std::filesystem::path& socket) {
  return fmt::format(R"(<!DOCTYPE busconfig PUBLIC
 "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
)",
                     socket.string());
}

std::string debian_system_bus_config(const std::filesystem::path& socket,
                                     const std::filesystem::path& system_conf) {
  std::string xml = without_comments(read_whole_file(system_conf));

  static const std::regex listen(R"(<listen>[^<]*</listen>)");
  const auto listens =
      std::distance(std::sregex_iterator(xml.begin(), xml.end(), listen), std::sregex_iterator());
  if (listens != 1) {
    throw std::runtime_error(fmt::format("{} has {} <listen> elements; expected exactly one",
                                         system_conf.string(), listens));
  }
  xml = std::regex_replace(xml, listen,
                           fmt::format("<listen>unix:path={}</listen>", socket.string()));

  // <user>: a daemon that changes its uid loses PR_SET_PDEATHSIG, and could then outlive a killed
  // test binary. Which user the daemon runs as changes nothing in the policy it applies.
  static const std::array<std::regex, 6> removed{
      std::regex(R"(<fork\s*/>)"),
      std::regex(R"(<syslog\s*/>)"),
      std::regex(R"(<user>[^<]*</user>)"),
      std::regex(R"(<pidfile>[^<]*</pidfile>)"),
      std::regex(R"(<servicehelper>[^<]*</servicehelper>)"),
      std::regex(R"(<standard_system_servicedirs\s*/>)")};
  for (const auto& r : removed) xml = std::regex_replace(xml, r, "");
  // What is left must not point outside the sandbox: the listen address is ours, nothing else may
  // name a socket, a pid file or a service directory.
  std::string rest = std::regex_replace(xml, listen, "");
  refuse_machine_elements(rest, system_conf);

  // Includes are relative to the including file's directory, which is no longer /usr/share/dbus-1.
  // selinux_root_relative ones are relative to the SELinux root, and stay as they are.
  static const std::regex include(
      R"(<(include|includedir)(\s[^>]*)?>([^<]*)</(include|includedir)>)");
  const std::filesystem::path base = system_conf.parent_path();
  std::string out;
  auto last = xml.cbegin();
  for (std::sregex_iterator it(xml.begin(), xml.end(), include), end; it != end; ++it) {
    const auto& m = *it;
    out.append(last, m[0].first);
    last = m[0].second;
    const std::string attributes = m[2].str();
    std::filesystem::path target = m[3].str();
    if (attributes.find("selinux_root_relative=\"yes\"") == std::string::npos) {
      if (target.is_relative()) target = base / target;
      check_included(target);
    }
    out += fmt::format("<{}{}>{}</{}>", m[1].str(), attributes, target.string(), m[4].str());
  }
  out.append(last, xml.cend());
  return out;
}

}  // namespace sandbox
