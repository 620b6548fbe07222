-- Replays a request list (one path per line) in order, each wrk thread from its own
-- offset, so every server sees the same requests. Usage: wrk -s replay.lua URL -- FILE
local counter = 0
function setup(thread)
  thread:set("offset", counter)
  counter = counter + 1
end

local paths = {}
local i = 0
function init(args)
  for line in io.lines(args[1]) do
    paths[#paths + 1] = line
  end
  i = (offset or 0) * math.floor(#paths / 8)
end

function request()
  i = i + 1
  if i > #paths then i = 1 end
  return wrk.format("GET", paths[i])
end
