-- wrk script: 1 KiB JSON POST to /webhooks/bench on keep-alive connections.
wrk.method = "POST"
wrk.path = "/webhooks/bench"
wrk.headers["Content-Type"] = "application/json"
local pad = string.rep("x", 1024 - 14)
wrk.body = '{"pad":"' .. pad .. '"}    '
