# Sourced by the guest's test scripts. Needs nothing beyond bash (no curl in the image).

# Prints the HTTP status of GET http://127.0.0.1:PORT/PATH, or "down" if nothing answers.
http_status() {
  local port=$1 path=$2 code=down
  if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
    printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$path" >&3
    IFS=' ' read -r -t 2 _ code _ <&3 || code=down
    exec 3<&-
  fi 2>/dev/null
  echo "${code:-down}"
}
