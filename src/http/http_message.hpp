#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace shim {

// The requests the readiness server parses (it writes its answers without building a message).
using http_request = boost::beast::http::request<boost::beast::http::string_body>;

}  // namespace shim
