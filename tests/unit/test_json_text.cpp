#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "kubelet/json_text.hpp"

namespace shim {
namespace {

using testing::HasSubstr;

std::string error_of(std::string_view text, std::size_t depth = 32) {
  const auto r = check_json_text(text, depth);
  EXPECT_FALSE(r.ok()) << "accepted: " << text;
  return r.ok() ? "" : r.error();
}

TEST(JsonText, AcceptsJson) {
  for (const std::string_view ok :
       {"{}", "[]", " \t\r\n{\"a\": 1}\r\n", "{\"a\":[1,-0,1.5e-3,2E+2,true,false,null,\"x\"]}",
        "{\"a\": {\"b\": {}}, \"c\": []}", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"", "5",
        "{\"caf\xc3\xa9\": \"\xf0\x9f\x98\x80\"}", "{\"a\": \"\\u2028\\u0085\"}"}) {
    EXPECT_TRUE(check_json_text(ok, 32).ok()) << ok;
  }
}

TEST(JsonText, RefusesWhatGoRefuses) {
  EXPECT_THAT(error_of(""), HasSubstr("expected a value"));
  EXPECT_THAT(error_of("{a: 1}"), HasSubstr("a member name in double quotes"));
  EXPECT_THAT(error_of("{'a': 1}"), HasSubstr("a member name"));
  EXPECT_THAT(error_of("{\"a\": 1,}"), HasSubstr("a member name"));
  EXPECT_THAT(error_of("[1,]"), HasSubstr("a value"));
  EXPECT_THAT(error_of("{\"a\" 1}"), HasSubstr("':'"));
  EXPECT_THAT(error_of("{\"a\": 1} x"), HasSubstr("nothing after the value"));
  EXPECT_THAT(error_of("{\"a\": 1}\n# c"), HasSubstr("line 2"));
  EXPECT_THAT(error_of("{\"a\": 01}"), HasSubstr("','"));
  EXPECT_THAT(error_of("{\"a\": 1.}"), HasSubstr("a digit"));
  EXPECT_THAT(error_of("{\"a\": +1}"), HasSubstr("a value"));
  EXPECT_THAT(error_of("{\"a\": .5}"), HasSubstr("a value"));
  EXPECT_THAT(error_of("{\"a\": NaN}"), HasSubstr("a value"));
  EXPECT_THAT(error_of("{\"a\": \"\\x41\"}"), HasSubstr("one of JSON's escapes"));
  EXPECT_THAT(error_of("{\"a\": \"\\u12\"}"), HasSubstr("four hex digits"));
  EXPECT_THAT(error_of("{\"a\": \"\t\"}"), HasSubstr("raw control character"));
  EXPECT_THAT(error_of("{\"a\": \"open}"), HasSubstr("the closing '\"'"));
  EXPECT_THAT(error_of("\xc2\xa0{}"), HasSubstr("a value")) << "a no-break space is not JSON's";
  EXPECT_THAT(error_of("[[[]]]", 2), HasSubstr("at most 2 levels"));
  EXPECT_TRUE(check_json_text("[[]]", 2).ok());
}

// JSON, but libyaml would read these raw characters in a string as line breaks.
TEST(JsonText, RefusesRawYamlLineBreaksInStrings) {
  for (const std::string_view br : {"\xc2\x85", "\xe2\x80\xa8", "\xe2\x80\xa9"}) {
    EXPECT_THAT(error_of("{\"a\": \"x" + std::string(br) + "y\"}"), HasSubstr("NEL, LS or PS"));
  }
}

}  // namespace
}  // namespace shim
