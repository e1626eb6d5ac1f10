// Small DOM helpers the dashboard's modules share. Every value from the API is written as text,
// never as HTML.

export const $ = (id) => document.getElementById(id);

export function element(tag, { className, text, href, title } = {}, ...children) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined) made.textContent = text;
  if (href) made.href = href;
  if (title) made.title = title;
  made.append(...children);
  return made;
}

export function badge(text, kind = text) {
  return element("span", { className: `badge ${kind}`, text });
}

/** A bar filled ``done`` of ``total`` (empty for a total of 0). */
export function bar(done, total) {
  const made = element("span", { className: "bar" }, element("span"));
  made.firstChild.style.width = `${total > 0 ? Math.min(100, (100 * done) / total) : 0}%`;
  return made;
}

export const hostHref = (hostId) => `#/hosts/${encodeURIComponent(hostId)}`;
export const count = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
export const clock = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "");

/** Replace ``container``'s children by one per item, reusing the element of an item already shown
 * (same key) so that what a person opened or hovers stays as it is. */
export function syncChildren(container, items, key, create, update) {
  const shown = new Map([...container.children].map((child) => [child.dataset.key, child]));
  const wanted = items.map((item) => {
    const k = key(item);
    let child = shown.get(k);
    if (!child) {
      child = create(item);
      child.dataset.key = k;
    }
    update(child, item);
    return child;
  });
  // Moving thousands of unchanged squares would cost the page a layout every poll.
  const current = container.children;
  if (wanted.length !== current.length || wanted.some((child, index) => child !== current[index])) {
    container.replaceChildren(...wanted);
  }
}
