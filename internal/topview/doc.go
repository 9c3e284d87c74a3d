// Package topview is the terminal view behind `hotsniff top`: a live table of
// the hottest keys, fed by a Source of snapshots of the hot set.
//
// Three parts:
//
//   - Source (source.go, replay.go) yields Snapshots. HTTPSource polls a
//     running daemon's /hotkeys endpoint; ReplaySource runs capture files
//     through the replay pipeline (capture → stream → decode → detect) in
//     process and samples the detector's hot set every interval of packet
//     time.
//   - Model (model.go, render.go) holds the rows, their rate history (trend),
//     hot/cold state, sort order, filter, pause and scroll position, and lays
//     out a frame of styled text for any terminal size, or a plain-text table.
//     It knows nothing about terminals and is tested directly.
//   - Run (ui.go) drives a tcell.Screen: it pulls snapshots in the background,
//     handles keys and resizes and redraws. Tests run it on tcell's
//     SimulationScreen and read the cells back.
//
// # The /hotkeys document
//
// GET http://ADDR/hotkeys on `hotsniff run --listen ADDR` returns the current
// hot set of that daemon:
//
//	{"v":1,"node":"cache-node-3","ts":"2026-11-29T18:00:00.123456Z","hot_qps":1000,
//	 "keys":[{"v":1,"seq":42,"type":"hot","proto":"redis","server":"10.0.0.5:6379",
//	          "ns":"0","key":"item:42","qps":1843.5,"ttl_ms":60000,
//	          "ts":"2026-11-29T18:00:00.123456Z","source":"detected","node":"cache-node-3"}]}
//
// v is the schema version (1), node the daemon's node name, ts the time of
// the document, hot_qps the default threshold, and keys the hot keys as
// hot-key events (docs/events.md) whose qps is the current measured rate: a key
// that is not valid UTF-8 comes as key_b64. Unknown fields are ignored.
//
// # Keys on screen
//
// A key is shown as it is when it is printable UTF-8, Go-quoted ("a\r\nb")
// when it is UTF-8 with control or other non-printable characters, and as
// b64:BASE64 when it is not UTF-8 (the event's key_b64). Keys too long for
// the column are elided in the middle with "…".
package topview
