#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "kubelet/yaml_document.hpp"

namespace shim {
namespace {

using testing::HasSubstr;

yaml_node parse_ok(std::string_view text) {
  auto r = parse_yaml(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
  return r.ok() ? r.value() : yaml_node{};
}

std::string parse_error(std::string_view text) {
  auto r = parse_yaml(text);
  EXPECT_FALSE(r.ok()) << "parsed: " << text;
  return r.ok() ? "" : r.error();
}

TEST(YamlDocument, BlockMappingsSequencesAndComments) {
  const auto doc = parse_ok(R"(# kubeadm's kubelet config
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration   # trailing comment
authentication:
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
clusterDNS:
- 10.96.0.10
shutdownGracePeriodByPodPriority:
  - priority: 0
    shutdownGracePeriodSeconds: 10
  -   priority: 2000001000
      shutdownGracePeriodSeconds: 90
url: http://example.com:8080/#anchor
)");
  ASSERT_EQ(doc.type, yaml_node::kind::mapping);
  EXPECT_EQ(doc.find("kind")->text, "KubeletConfiguration");
  EXPECT_EQ(doc.find("authentication")->find("x509")->find("clientCAFile")->text,
            "/etc/kubernetes/pki/ca.crt");
  const auto* dns = doc.find("clusterDNS");
  ASSERT_EQ(dns->type, yaml_node::kind::sequence);
  ASSERT_EQ(dns->items.size(), 1u);
  EXPECT_EQ(dns->items[0].text, "10.96.0.10");
  const auto* groups = doc.find("shutdownGracePeriodByPodPriority");
  ASSERT_EQ(groups->items.size(), 2u);
  EXPECT_EQ(groups->items[1].find("priority")->text, "2000001000");
  EXPECT_EQ(groups->items[1].find("shutdownGracePeriodSeconds")->text, "90");
  EXPECT_EQ(doc.find("url")->text, "http://example.com:8080/#anchor");
}

TEST(YamlDocument, QuotedScalarsKeepTheirText) {
  const auto doc = parse_ok(
      "a: \"30s # not a comment\"\n"
      "b: 'it''s'\n"
      "\"c d\": \"\\u00e9\\t\\\"x\\\"\"\n"
      "e: '10'\n");
  EXPECT_EQ(doc.find("a")->text, "30s # not a comment");
  EXPECT_TRUE(doc.find("a")->quoted);
  EXPECT_EQ(doc.find("b")->text, "it's");
  EXPECT_EQ(doc.find("c d")->text, "\xc3\xa9\t\"x\"");
  EXPECT_TRUE(doc.find("e")->quoted);
  EXPECT_FALSE(parse_ok("e: 10\n").find("e")->quoted);
}

TEST(YamlDocument, JsonAcrossLinesAndFlowCollections) {
  const auto doc = parse_ok(R"({
  "kind": "KubeletConfiguration",
  "shutdownGracePeriod": "45s",
  "shutdownGracePeriodByPodPriority": [
    {"priority": 0, "shutdownGracePeriodSeconds": 30},
    {"priority": 2000000000, "shutdownGracePeriodSeconds": 15}
  ],
  "empty": {}, "none": []
})");
  EXPECT_EQ(doc.find("shutdownGracePeriod")->text, "45s");
  const auto* groups = doc.find("shutdownGracePeriodByPodPriority");
  ASSERT_EQ(groups->items.size(), 2u);
  EXPECT_EQ(groups->items[1].find("priority")->text, "2000000000");
  EXPECT_EQ(doc.find("empty")->type, yaml_node::kind::mapping);
  EXPECT_EQ(doc.find("none")->type, yaml_node::kind::sequence);

  const auto inline_flow = parse_ok("groups: [{priority: 5, s: 1}, {priority: 6}]\n");
  ASSERT_EQ(inline_flow.find("groups")->items.size(), 2u);
  EXPECT_EQ(inline_flow.find("groups")->items[1].find("priority")->text, "6");
}

TEST(YamlDocument, ManifestWithBlockScalarsAndNestedSequences) {
  const auto doc = parse_ok(R"(apiVersion: v1
kind: Pod
metadata:
  annotations:
    note: |
      two lines: with a colon
      # and what looks like a comment
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=10.0.0.1
    name: kube-apiserver
  - - nested
  priority: 2000001000
  priorityClassName: system-node-critical
)");
  const auto* spec = doc.find("spec");
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->find("priority")->text, "2000001000");
  EXPECT_EQ(spec->find("priorityClassName")->text, "system-node-critical");
  const auto* containers = spec->find("containers");
  ASSERT_EQ(containers->items.size(), 2u);
  EXPECT_EQ(containers->items[0].find("command")->items[1].text, "--advertise-address=10.0.0.1");
  EXPECT_EQ(containers->items[1].items[0].text, "nested");
  EXPECT_THAT(doc.find("metadata")->find("annotations")->find("note")->text,
              HasSubstr("two lines"));
}

TEST(YamlDocument, RefusesWhatItDoesNotRead) {
  // libyaml's own words now, with the line, column and the tab named.
  EXPECT_THAT(parse_error("a:\n\tb: 1\n"), HasSubstr("line 2, column 1"));
  EXPECT_THAT(parse_error("a:\n\tb: 1\n"), HasSubstr("tab"));
  EXPECT_THAT(parse_error("a: &x 1\nb: *x\n"), HasSubstr("anchors"));
  EXPECT_THAT(parse_error("a: !!int 1\n"), HasSubstr("tags"));
  EXPECT_THAT(parse_error("a: 1\n---\nb: 2\n"), HasSubstr("second YAML document"));
  // libyaml: "did not find expected ',' or ']'" where the stream ends, on line 2.
  EXPECT_THAT(parse_error("a: [1, 2\n"), HasSubstr("did not find expected ',' or ']'"));
  EXPECT_THAT(parse_error("a: 1\na: 2\n"), HasSubstr("line 2: duplicate key 'a'"));
  // libyaml: a key indented under a scalar's line is not a key.
  EXPECT_THAT(parse_error("a: 1\n  b: 2\n"),
              HasSubstr("line 2, column 4: mapping values are not allowed in this context"));
  EXPECT_THAT(parse_error("a: \"open\n"), HasSubstr("found unexpected end of stream"));
  // A plain scalar is a whole document to a YAML parser: kubelet's readers then say it is not a
  // mapping (test_kubelet_shutdown).
  EXPECT_EQ(parse_ok("just words\n").type, yaml_node::kind::scalar);
  EXPECT_THAT(parse_error("a: \"\\q\"\n"), HasSubstr("found unknown escape character"));
  EXPECT_THAT(parse_error("a: \"\\ud800\"\n"),
              HasSubstr("found invalid Unicode character escape code"));
  EXPECT_THAT(parse_error("a: \"\\u12\"\n"), HasSubstr("did not find expected hexdecimal number"));
  EXPECT_THAT(parse_error(std::string("a: 1\0b", 6)), HasSubstr("NUL"));
  EXPECT_THAT(parse_error(""), HasSubstr("no content"));
  EXPECT_THAT(parse_error("# only a comment\n"), HasSubstr("no content"));
  // Newly refused: what kubelet's go-yaml v2 and sigs.k8s.io/yaml read otherwise or not at all.
  EXPECT_THAT(parse_error("%YAML 1.2\n---\na: 1\n"), HasSubstr("line 1: YAML directives"));
  EXPECT_THAT(parse_error("a: \"x\\/y\"\n"), HasSubstr("line 1: a \"\\/\" escape"));
  EXPECT_EQ(parse_ok("a: \"x\\\\/y\"\n").find("a")->text, "x\\/y") << "an escaped backslash";
  EXPECT_THAT(parse_error("a: [x?y]\n"), HasSubstr("a '?' inside a plain scalar"));
  EXPECT_EQ(parse_ok("a: x?y\n").find("a")->text, "x?y") << "outside a flow collection";
  EXPECT_THAT(parse_error("a: 1\n~: 2\n"), HasSubstr("line 2: a null key"));
  EXPECT_THAT(parse_error("a:\n  NULL: 2\n"), HasSubstr("line 2: a null key"));
  EXPECT_THAT(parse_error("a: 1\n18446744073709551615: 2\n"), HasSubstr("beyond int64"));
  EXPECT_THAT(parse_error("a:\n  b: [1, .inf]\n"), HasSubstr("line 2: '.inf' has no JSON form"));
  EXPECT_THAT(parse_error("<<: {a: 1}\n"), HasSubstr("merge key"));
  EXPECT_THAT(parse_error("? [a]\n: 1\n"), HasSubstr("a key that is a collection"));
  EXPECT_THAT(parse_error("a: 1\n...\nb: 2\n"), HasSubstr("line 3"));
  // Quoted, they are ordinary keys and strings.
  const auto quoted = parse_ok("\"~\": 1\n'<<': 2\n\"18446744073709551615\": 3\nx: '.inf'\n");
  EXPECT_EQ(quoted.keys, (std::vector<std::string>{"~", "<<", "18446744073709551615", "x"}));
}

TEST(YamlDocument, ResolvesPlainScalarsAsGoYamlV2) {
  const auto type_of = [](std::string_view value) {
    const auto doc = parse_ok("a: " + std::string(value) + "\n");
    return doc.find("a")->resolved();
  };
  for (const auto v : {"", "~", "null", "Null", "NULL"})
    EXPECT_EQ(type_of(v), yaml_type::null) << v;
  for (const auto v : {"y", "Yes", "on", "OFF", "n", "true", "False"}) {
    EXPECT_EQ(type_of(v), yaml_type::boolean) << v;
  }
  for (const auto v : {"0", "-5", "+5", "010", "0o10", "0x1F", "0b101", "-0b1", "1_000",
                       "9223372036854775807", "18446744073709551615", "0x1FFFFFFFFFFFFFFFFF"}) {
    EXPECT_EQ(type_of(v), yaml_type::integer) << v;
  }
  for (const auto v : {"1.5", "30.0", "1e3", "-1E-3", ".5", "08", "1.", "-99999999999999999999",
                       "99999999999999999999"}) {
    EXPECT_EQ(type_of(v), yaml_type::floating) << v;
  }
  for (const auto v : {"30s", "1:30", "0x", "1e999", ".", "._5", "2001-12-14", "Pod", "nul", "yess",
                       "1_000s", "-x", "+.5x"}) {
    EXPECT_EQ(type_of(v), yaml_type::string) << v;
  }
  EXPECT_EQ(parse_ok("a: '5'\n").find("a")->resolved(), yaml_type::string);
  EXPECT_EQ(parse_ok("a: |\n  5\n").find("a")->resolved(), yaml_type::string);
  EXPECT_EQ(parse_ok("a: 5\n").find("a")->line, 1u);
}

TEST(YamlDocument, JsonSyntaxReadsTheSlashEscape) {
  const auto doc = parse_yaml("{\"a\": \"x\\/y\"}", yaml_syntax::json);
  ASSERT_TRUE(doc.ok()) << doc.error();
  EXPECT_EQ(doc.value().find("a")->text, "x/y");
}

// Every line break of YAML 1.1 ends a line (issue 18, item 3): CR, CRLF, NEL, LS, PS. Line numbers
// in errors count them too.
TEST(YamlDocument, EveryYamlLineBreakEndsALine) {
  for (const std::string br : {"\r", "\r\n", "\xc2\x85", "\xe2\x80\xa8", "\xe2\x80\xa9"}) {
    SCOPED_TRACE(testing::PrintToString(br));
    auto doc = parse_ok("a: 1" + br + "b:" + br + "  c: 2" + br + "  d: [3," + br + "    4]" + br +
                        "# a comment" + br + "e: x # trailing" + br);
    ASSERT_EQ(doc.type, yaml_node::kind::mapping);
    EXPECT_EQ(doc.keys, (std::vector<std::string>{"a", "b", "e"}));
    EXPECT_EQ(doc.find("a")->text, "1");
    EXPECT_EQ(doc.find("b")->find("c")->text, "2");
    ASSERT_EQ(doc.find("b")->find("d")->items.size(), 2u);
    EXPECT_EQ(doc.find("b")->find("d")->items[1].text, "4");
    EXPECT_EQ(doc.find("e")->text, "x");
    EXPECT_THAT(parse_error("a: 1" + br + "b: 2" + br + "a: 3" + br),
                HasSubstr("line 3: duplicate key 'a'"));
  }
}

// Inside quotes, an escaped line break is a character of the text, not a line break.
TEST(YamlDocument, EscapedLineBreaksInQuotesAreText) {
  const auto doc = parse_ok(
      "a: \"x\\ny\\u2028z\\x85w\\L\\P\\N\"\n"
      "b: 'single \\n stays'\n");
  EXPECT_EQ(doc.find("a")->text, "x\ny\xe2\x80\xa8z\xc2\x85w\xe2\x80\xa8\xe2\x80\xa9\xc2\x85");
  EXPECT_EQ(doc.find("b")->text, "single \\n stays");
  EXPECT_EQ(doc.keys.size(), 2u);
}

TEST(YamlDocument, BoundsSizeDepthAndNodes) {
  std::string big = "a: " + std::string(kMaxYamlBytes, 'x') + "\n";
  EXPECT_THAT(parse_error(big), HasSubstr("more than"));

  std::string deep_flow(kMaxYamlDepth + 2, '[');
  deep_flow += std::string(kMaxYamlDepth + 2, ']');
  EXPECT_THAT(parse_error("a: " + deep_flow + "\n"), HasSubstr("nested too deeply"));

  std::string deep_block;
  for (std::size_t i = 0; i < kMaxYamlDepth + 2; ++i) {
    deep_block += std::string(i * 2, ' ') + "k:\n";
  }
  deep_block += std::string((kMaxYamlDepth + 2) * 2, ' ') + "v: 1\n";
  EXPECT_THAT(parse_error(deep_block), HasSubstr("nested too deeply"));

  std::string dashes;
  for (std::size_t i = 0; i < kMaxYamlDepth + 2; ++i) dashes += "- ";
  EXPECT_THAT(parse_error(dashes + "x\n"), HasSubstr("nested too deeply"));

  std::string many = "[";
  for (std::size_t i = 0; i < kMaxYamlNodes; ++i) many += "1,";
  EXPECT_THAT(parse_error(many + "1]"), HasSubstr("more than 10000 nodes"));
  many.resize(many.size() - 2);  // one item fewer
  many.back() = ']';
  EXPECT_EQ(parse_ok(many).items.size(), kMaxYamlNodes - 1) << "the sequence is a node too";
}

}  // namespace
}  // namespace shim
