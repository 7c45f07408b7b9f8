#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "yaml_subset.hpp"

namespace shim {
namespace {

using testing::HasSubstr;

yaml_node parse_ok(std::string_view text) {
  auto r = parse_yaml_subset(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
  return r.ok() ? r.value() : yaml_node{};
}

std::string parse_error(std::string_view text) {
  auto r = parse_yaml_subset(text);
  EXPECT_FALSE(r.ok()) << "parsed: " << text;
  return r.ok() ? "" : r.error();
}

TEST(YamlSubset, BlockMappingsSequencesAndComments) {
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

TEST(YamlSubset, QuotedScalarsKeepTheirText) {
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

TEST(YamlSubset, JsonAcrossLinesAndFlowCollections) {
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

TEST(YamlSubset, ManifestWithBlockScalarsAndNestedSequences) {
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

TEST(YamlSubset, RefusesWhatItDoesNotRead) {
  EXPECT_THAT(parse_error("a:\n\tb: 1\n"), HasSubstr("tab"));
  EXPECT_THAT(parse_error("a: &x 1\nb: *x\n"), HasSubstr("anchors"));
  EXPECT_THAT(parse_error("a: !!int 1\n"), HasSubstr("tags"));
  EXPECT_THAT(parse_error("a: 1\n---\nb: 2\n"), HasSubstr("second YAML document"));
  EXPECT_THAT(parse_error("a: [1, 2\n"), HasSubstr("never closed"));
  EXPECT_THAT(parse_error("a: 1\na: 2\n"), HasSubstr("line 2: duplicate key 'a'"));
  EXPECT_THAT(parse_error("a: 1\n  b: 2\n"), HasSubstr("line 2: unexpected indentation"));
  EXPECT_THAT(parse_error("a: \"open\n"), HasSubstr("not closed"));
  EXPECT_THAT(parse_error("just words\n"), HasSubstr("expected 'key: value'"));
  EXPECT_THAT(parse_error("a: \"\\q\"\n"), HasSubstr("unsupported escape"));
  EXPECT_THAT(parse_error("a: \"\\ud800\"\n"), HasSubstr("no surrogates"));
  EXPECT_THAT(parse_error("a: \"\\u12\"\n"), HasSubstr("four hex digits"));
  EXPECT_THAT(parse_error(std::string("a: 1\0b", 6)), HasSubstr("NUL"));
  EXPECT_THAT(parse_error(""), HasSubstr("no content"));
  EXPECT_THAT(parse_error("# only a comment\n"), HasSubstr("no content"));
}

TEST(YamlSubset, BoundsSizeAndDepth) {
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
}

}  // namespace
}  // namespace shim
