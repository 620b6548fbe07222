-- Creates links with generated codes through the API: POST /api/v1/links with the
-- operator key from REBOUND_API_KEY. Usage: wrk -s create.lua API_URL
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("REBOUND_API_KEY") or "")
local counter = 0
function setup(thread)
  thread:set("prefix", counter)
  counter = counter + 1
end
local n = 0
function request()
  n = n + 1
  local body = '{"long_url":"https://example.com/created/' .. (prefix or 0) .. '/' .. n .. '"}'
  return wrk.format(nil, "/api/v1/links", nil, body)
end
