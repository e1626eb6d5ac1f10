// Server-sent events read with fetch(): EventSource cannot send an Authorization header.

/** One event of the stream (the text between two blank lines), or null for a comment or keep-alive. */
export function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return data.length ? { event, data: data.join("\n") } : null;
}

/**
 * Follow the event stream at ``path``, calling ``onEvent({event, data})`` for each event and
 * ``onOpen()`` once it answers 200. Resolves "absent" when the API has no such route (404) or
 * refuses it, "ended" when the stream closes; rejects when the connection fails.
 */
export async function follow(path, headers, { onOpen, onEvent }) {
  const response = await fetch(path, { headers: { ...headers, Accept: "text/event-stream" }, cache: "no-store" });
  if (!response.ok || !response.body) {
    await response.body?.cancel();
    return "absent";
  }
  onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return "ended";
    buffer += value;
    const blocks = buffer.split(/\r?\n\r?\n/);
    buffer = blocks.pop();
    for (const block of blocks) {
      const event = parseEvent(block);
      if (event) onEvent(event);
    }
  }
}
