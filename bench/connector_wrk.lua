-- wrk script for the connector benchmark: GET /api/orders/<random id in 1..ORDERS>.
-- The API key comes from the command line (-H "X-API-Key: ..."), the id range from ORDERS.
local orders = tonumber(os.getenv("ORDERS") or "20000")

setup = function(thread)
  thread:set("seed", math.random(1, 2147483647))
end

init = function(args)
  math.randomseed(seed or os.time())
end

request = function()
  return wrk.format("GET", "/api/orders/" .. math.random(1, orders))
end
