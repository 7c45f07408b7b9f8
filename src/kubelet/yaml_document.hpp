#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace shim {

// A YAML 1.1 scalar's type, as go-yaml v2's resolve() gives it to a plain scalar (a quoted or
// block scalar is always a string). kubelet reads its files through sigs.k8s.io/yaml, which
// resolves them with go-yaml v2 and then writes JSON for Go's encoding/json.
enum class yaml_type { null, boolean, integer, floating, string };

// kubelet's configuration file and a static pod's manifest as kubelet reads them, as a tree of
// mappings, sequences and scalars. libyaml parses the text (go-yaml v2 is a port of it: the same
// YAML 1.1, with every line break it has: LF, CR, CRLF, NEL, LS and PS); a scalar keeps its text
// and its style, and resolved() gives its type.
struct yaml_node {
  enum class kind { scalar, mapping, sequence };
  kind type = kind::scalar;
  std::string text;      // a scalar's value (quotes removed, escapes applied, lines folded)
  bool quoted = false;   // not plain (quoted, or a | or > block scalar): always a string
  std::size_t line = 0;  // 1-based, where the node starts: for messages
  // A sequence's items; a mapping's values, in file order, keys[i] being the key of items[i].
  // (Two vectors: a pair with the incomplete yaml_node inside yaml_node is not allowed.)
  std::vector<yaml_node> items;
  std::vector<std::string> keys;

  // The value of key in a mapping, or nullptr (also for a node that is not a mapping).
  const yaml_node* find(std::string_view key) const;
  // A scalar's type; null for a collection.
  yaml_type resolved() const;
};

// Bounds: parsing is linear in the input, and these keep the tree small and the recursion of its
// readers shallow whatever the file says.
inline constexpr std::size_t kMaxYamlBytes = 256 * 1024;
inline constexpr std::size_t kMaxYamlDepth = 32;      // collections inside collections
inline constexpr std::size_t kMaxYamlNodes = 10'000;  // kubeadm's manifests have about 100

// How the text is to be read. kubelet reads a file that starts with '{' with Go's encoding/json,
// not as YAML: such a text, once check_json_text accepted it, is read by libyaml all the same
// (JSON's syntax is YAML's there), but "\/" is an escape, as in JSON.
enum class yaml_syntax { yaml, json };

// The whole text as one document, or an error of one line naming the line. Refused:
//  - what go-yaml v2.4 reads otherwise than libyaml 0.2.5, so that the tree is never one kubelet
//    does not see: directives (go-yaml takes %YAML 1.1 only), the "\/" escape, a '?' inside a
//    plain scalar in a flow collection (go-yaml ends the scalar there);
//  - what sigs.k8s.io/yaml cannot turn into JSON, which makes kubelet refuse the file: a null key,
//    an integer key beyond int64, .inf and .nan;
//  - what the shim does not follow: anchors and aliases, tags, merge keys (<<), keys that are
//    collections, a second document (kubelet reads the first), a duplicate key (kubelet takes the
//    last);
//  - beyond the bounds above; a NUL byte; no document at all; a key of more than 1024 characters
//    but after "? " (libyaml's and go-yaml's limit for a simple key; JSON has none).
result<yaml_node> parse_yaml(std::string_view text, yaml_syntax syntax = yaml_syntax::yaml);

}  // namespace shim
