// The API as the dashboard reads it: this tab's token, and requests that send it.

const TOKEN_KEY = "vmsched.token";

// sessionStorage: the token lives as long as the tab, and no other tab or site sees it.
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  forget: () => sessionStorage.removeItem(TOKEN_KEY),
};

export function authorization() {
  return { Authorization: `Bearer ${token.get()}` };
}

/** A request the API answered with an error: its status and the API's own words. */
export class Refused extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
  }
}

/** GET a /v1 route: its JSON (or its text, for another ``accept``); Refused when not 2xx. */
export async function get(path, { accept = "application/json" } = {}) {
  const response = await fetch(path, { headers: { ...authorization(), Accept: accept }, cache: "no-store" });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = await response.json();
      detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? body);
    } catch {
      // not JSON: the status text says enough
    }
    throw new Refused(response.status, detail);
  }
  return accept === "application/json" ? response.json() : response.text();
}

/**
 * The newest VMs of a GET /v1/vms listing, which the API serves oldest first with a cursor.
 * Each read starts at the cursor of the page before the last one it saw, so it reads about two
 * pages however many VMs there are, and still always holds at least one full page of the newest.
 */
export class Tail {
  constructor(query, pageSize = 200) {
    this.query = query;
    this.pageSize = pageSize;
    this.from = null;
  }

  async read() {
    let previous = null;
    let current = { cursor: this.from, items: [] };
    for (;;) {
      const params = new URLSearchParams({ ...this.query, limit: String(this.pageSize) });
      if (current.cursor) params.set("cursor", current.cursor);
      let page;
      try {
        page = await get(`/v1/vms?${params}`);
      } catch (error) {
        if (error instanceof Refused && error.status === 422 && current.cursor) {
          this.from = null; // a cursor the API no longer reads: start over from the oldest
        }
        throw error;
      }
      current.items = page.items;
      if (!page.next_cursor) break;
      previous = current;
      current = { cursor: page.next_cursor, items: [] };
    }
    if (previous) this.from = previous.cursor;
    return [...(previous ? previous.items : []), ...current.items];
  }
}
