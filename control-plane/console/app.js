// The Rebound console: a page per hash route, drawn from the control plane's API with the
// key the person signed in with. The key lives in sessionStorage (gone with the tab), never
// in a URL. Errors are shown as the API words them.

const KEY_SLOT = "rebound.apiKey";
const main = document.getElementById("main");
const nav = document.getElementById("nav");
let me = null; // {id, role, domains} of the signed-in key

/** An answer of the API that is not a success, in its own words. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, { body, headers = {}, raw = false } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY_SLOT) || ""}`, ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (!res.ok) {
    let code = "http_" + res.status;
    let message = `${res.status} ${res.statusText}`;
    try {
      const e = (await res.json()).error;
      code = e.code;
      message = e.message;
    } catch (_) { /* not the API's error body */ }
    if (res.status === 401 && path !== "/api/v1/me") signOut();
    throw new ApiError(res.status, code, message);
  }
  if (raw) return res;
  return res.status === 204 ? null : res.json();
}

/** Builds an element: h("a", {href: "#/"}, "text", child). `on` holds event handlers. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElementNS(
    tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
    tag,
  );
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === "svg" || v === false || v === null || v === undefined) continue;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}
const svg = (tag, attrs = {}, ...children) => h(tag, { ...attrs, svg: true }, ...children);

let fieldIds = 0;
/** A labelled control: the label names it, a hint describes it. */
function field(label, control, hint) {
  const id = control.id || `f${++fieldIds}`;
  control.id = id;
  const hintEl = hint ? h("span", { class: "hint", id: `${id}-hint` }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  const isCheck = control.type === "checkbox" || control.type === "radio";
  return isCheck
    ? h("div", { class: "field check" }, control, h("label", { for: id }, label), hintEl)
    : h("div", { class: "field" }, h("label", { for: id }, label), control, hintEl);
}

function errorBox(err) {
  const text = err instanceof ApiError ? `${err.message} (${err.code})` : String(err.message || err);
  return h("p", { class: "error", role: "alert" }, text);
}

function notice(text) {
  return h("p", { class: "notice", role: "status" }, text);
}

/** Replaces the page with a heading and content (null, undefined and false left out, as
 *  h() leaves them out), and moves focus to it. */
function page(title, ...content) {
  document.title = `${title} · Rebound console`;
  const shown = content.flat().filter((c) => c !== null && c !== undefined && c !== false);
  main.replaceChildren(h("h1", { tabindex: "-1", id: "page-title" }, title), ...shown);
  document.getElementById("page-title").focus();
}

const isOperator = () => me && me.role === "operator";

/** The domains the key may use, the default one first; null when they cannot be read. */
async function loadDomains() {
  try {
    return (await api("GET", "/api/v1/domains")).domains;
  } catch (_) {
    return null;
  }
}

/** The domain a new link goes on unless another is chosen: a scoped key's first domain,
 *  else the default one. */
function preferredDomain(domains) {
  if (me && me.domains && me.domains.length) return me.domains[0];
  const d = domains.find((x) => x.default) || domains[0];
  return d ? d.name : "";
}

/** A select of `domains`, `selected` chosen; the default one says so. */
function domainSelect(name, domains, selected) {
  return h("select", { name }, domains.map((d) =>
    h("option", { value: d.name, selected: d.name === selected }, d.default ? `${d.name} (default)` : d.name)));
}

/** `?domain=…` for a call on a link of `domain` (nothing when not known). */
const onDomain = (domain) => (domain ? `?${new URLSearchParams({ domain })}` : "");

/** The console's address of a link's page: its code, and its domain. */
const linkHref = (code, domain) => `#/links/${encodeURIComponent(code)}${onDomain(domain)}`;

function drawNav(route) {
  if (!me) {
    nav.replaceChildren();
    return;
  }
  const item = (href, text, name) =>
    h("a", { href, "aria-current": route === name ? "page" : false }, text);
  nav.replaceChildren(...[
    item("#/links", "Links", "links"),
    item("#/new", "New link", "new"),
    isOperator() ? item("#/stats", "Summary", "stats") : null,
    isOperator() ? item("#/domains", "Domains", "domains") : null,
    isOperator() ? item("#/keys", "API keys", "keys") : null,
    isOperator() ? item("#/audit", "Audit log", "audit") : null,
    isOperator() ? item("#/abuse", "Abuse", "abuse") : null,
    h("span", { class: "hint" }, `${me.id} (${me.role})`),
    h("button", { type: "button", on: { click: () => { signOut(); location.hash = "#/signin"; } } }, "Sign out"),
  ].filter(Boolean));
}

function signOut() {
  sessionStorage.removeItem(KEY_SLOT);
  me = null;
}

// ---- pages ----------------------------------------------------------------------------

function signInPage(message) {
  const key = h("input", { type: "password", name: "key", autocomplete: "off", required: true, spellcheck: "false" });
  const out = h("div");
  const form = h("form", { class: "stack", on: { submit: async (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY_SLOT, key.value.trim());
    try {
      me = await api("GET", "/api/v1/me");
      if (location.hash === "#/links") route();
      else location.hash = "#/links";
    } catch (err) {
      signOut();
      out.replaceChildren(errorBox(err));
      key.focus();
    }
  } } },
    field("API key", key, "An operator or creator key. It is kept in this tab only, until you sign out or close it."),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Sign in")),
  );
  page("Sign in", message ? notice(message) : null, form, out);
}

function linkState(link) {
  if (!link.is_active) return ["deleted", "deleted"];
  if (link.expires_at && Date.parse(link.expires_at) <= Date.now()) return ["expired", "expired"];
  return ["active", "active"];
}

function stateBadge(link) {
  const [cls, text] = linkState(link);
  return h("span", { class: `state state-${cls}` }, text);
}

function linksTable(links) {
  if (links.length === 0) return h("p", {}, "No links.");
  return h("div", { class: "scroll" }, h("table", { id: "links-table" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Code"), h("th", { scope: "col" }, "Domain"),
      h("th", { scope: "col" }, "Target"), h("th", { scope: "col" }, "Created"), h("th", { scope: "col" }, "State"))),
    h("tbody", {}, links.map((l) => h("tr", { "data-code": l.code, "data-domain": l.domain },
      h("td", {}, h("a", { href: linkHref(l.code, l.domain) }, l.code)),
      h("td", {}, l.domain),
      h("td", { class: "target" }, l.long_url),
      h("td", {}, new Date(l.created_at).toLocaleString()),
      h("td", {}, stateBadge(l))))),
  ));
}

/** Most pages a search reads through (1,000 links each). */
const SEARCH_PAGES = 10;

async function linksPage(params) {
  const query = params.get("q") || "";
  const limit = Number(params.get("limit")) || 25;
  const cursor = params.get("cursor") || "";
  const back = params.get("back") || ""; // the cursors of the pages before, comma-separated
  const q = h("input", { type: "search", name: "q", value: query, placeholder: "code or part of the target" });
  const size = h("select", { name: "limit" }, [25, 100, 500].map((n) => h("option", { value: n, selected: n === limit }, String(n))));
  const form = h("form", { class: "inline", role: "search", on: { submit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    if (q.value.trim()) p.set("q", q.value.trim());
    p.set("limit", size.value);
    location.hash = `#/links?${p}`;
  } } },
    field("Search by code or target", q),
    field("Per page", size),
    h("button", { type: "submit" }, "Search"));
  const results = h("div", { "aria-live": "polite" }, h("p", {}, "Loading…"));
  page("Links", form, results);
  try {
    if (query) {
      const needle = query.toLowerCase();
      let found = [];
      let next = null;
      let read = 0;
      for (let i = 0; i < SEARCH_PAGES; i++) {
        const p = new URLSearchParams({ limit: "1000" });
        if (next) p.set("cursor", next);
        const res = await api("GET", `/api/v1/links?${p}`);
        read += res.links.length;
        found = found.concat(res.links.filter((l) =>
          l.code.toLowerCase().includes(needle) || l.long_url.toLowerCase().includes(needle)));
        next = res.next_cursor;
        if (!next) break;
      }
      results.replaceChildren(
        h("p", { class: "hint" }, `${found.length} of the newest ${read} links match “${query}”` +
          (next ? " (searched the newest links only)." : ".")),
        linksTable(found.slice(0, limit)),
      );
      return;
    }
    const p = new URLSearchParams({ limit: String(limit) });
    if (cursor) p.set("cursor", cursor);
    const res = await api("GET", `/api/v1/links?${p}`);
    const pager = h("div", { class: "actions" });
    const backs = back ? back.split(",") : [];
    if (cursor) {
      const prev = new URLSearchParams({ limit: String(limit) });
      const before = backs.slice(0, -1);
      if (backs.length && backs[backs.length - 1]) prev.set("cursor", backs[backs.length - 1]);
      if (before.length) prev.set("back", before.join(","));
      pager.append(h("a", { class: "button", href: `#/links?${prev}` }, "← Newer"));
    }
    if (res.next_cursor) {
      const nextP = new URLSearchParams({ limit: String(limit), cursor: res.next_cursor, back: [...backs, cursor].join(",") });
      pager.append(h("a", { class: "button", href: `#/links?${nextP}` }, "Older →"));
    }
    results.replaceChildren(linksTable(res.links), pager);
  } catch (err) {
    results.replaceChildren(errorBox(err));
  }
}

async function newLinkPage() {
  page("New link", h("p", {}, "Loading…"));
  const domains = await loadDomains();
  const domain = domains && domains.length ? domainSelect("domain", domains, preferredDomain(domains)) : null;
  const longUrl = h("input", { type: "url", name: "long_url", required: true, placeholder: "https://example.com/page" });
  const alias = h("input", { type: "text", name: "custom_alias", pattern: "[A-Za-z0-9_\\-]{3,32}", autocomplete: "off" });
  const expiry = h("select", { name: "expiry" },
    h("option", { value: "never" }, "Never"), h("option", { value: "at" }, "At a time"), h("option", { value: "ttl" }, "After a number of seconds"));
  const expiresAt = h("input", { type: "datetime-local", name: "expires_at" });
  const ttl = h("input", { type: "number", name: "ttl_seconds", min: 1, max: 315360000, step: 1 });
  const redirect = h("select", { name: "redirect" }, [302, 301, 307, 308].map((s) =>
    h("option", { value: s }, { 301: "301 Moved Permanently", 302: "302 Found (default)", 307: "307 Temporary Redirect", 308: "308 Permanent Redirect" }[s])));
  const forward = h("input", { type: "checkbox", name: "forward_query" });
  const idem = h("input", { type: "text", name: "idempotency_key", autocomplete: "off", maxlength: 255 });
  const password = h("input", { type: "password", name: "password", autocomplete: "new-password", minlength: 4, maxlength: 128 });
  const atField = field("Expires at (your local time)", expiresAt);
  const ttlField = field("Expires after (seconds)", ttl, "1 to 315,360,000 (10 years).");
  const showExpiry = () => {
    atField.hidden = expiry.value !== "at";
    ttlField.hidden = expiry.value !== "ttl";
  };
  expiry.addEventListener("change", showExpiry);
  const rules = rulesEditor([]);
  const rulesBox = h("details", { id: "new-rules" }, h("summary", {}, "Rules (optional)"),
    h("p", { class: "hint" }, "Send visitors elsewhere by their country, operating system, device or language, or split them between targets by weight. The first rule that matches decides; none matching, the target URL. " + RULE_MATCHING),
    rules.element);
  const out = h("div");
  const form = h("form", { class: "stack", on: { submit: async (e) => {
    e.preventDefault();
    const checkedRules = rules.collect();
    if (!checkedRules.rules) {
      rulesBox.open = true;
      out.replaceChildren(problemsBox(checkedRules.problems));
      rules.focusFirst(checkedRules.problems);
      return;
    }
    const body = { long_url: longUrl.value.trim(), redirect: Number(redirect.value), forward_query: forward.checked };
    if (checkedRules.rules.length) body.rules = checkedRules.rules;
    if (alias.value.trim()) body.custom_alias = alias.value.trim();
    if (domain) body.domain = domain.value;
    if (expiry.value === "at" && expiresAt.value) body.expires_at = new Date(expiresAt.value).toISOString();
    if (expiry.value === "ttl" && ttl.value) body.ttl_seconds = Number(ttl.value);
    if (password.value) body.password = password.value;
    const headers = idem.value.trim() ? { "Idempotency-Key": idem.value.trim() } : {};
    try {
      const link = await api("POST", "/api/v1/links", { body, headers });
      location.hash = linkHref(link.code, link.domain);
    } catch (err) {
      out.replaceChildren(errorBox(err));
      if (/^rules\[/.test(err.message)) {
        rulesBox.open = true;
        rules.markServer(err.message);
      }
    }
  } } },
    field("Target URL", longUrl, "An absolute http or https URL."),
    domain ? field("Domain", domain, "The host of the short URL. An alias is unique on its domain.") : null,
    field("Custom alias (optional)", alias, "3 to 32 letters, digits, _ or -. Empty: a generated code."),
    field("Expiry", expiry),
    atField, ttlField,
    field("Redirect status", redirect),
    field("Forward the visitor's query string to the target", forward),
    field("Password (optional)", password, "4 to 128 characters. Visitors must enter it before they are redirected; it is stored hashed and never shown again."),
    field("Idempotency key (optional)", idem, "Sending the same key again returns the first answer instead of a second link."),
    rulesBox,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create link")),
  );
  showExpiry();
  page("New link", form, out);
}

const isoDay = (d) => d.toISOString().slice(0, 10);

/** Per-day clicks as a bar chart, people's with bots' stacked on them in another colour,
 * with the numbers also in a table. */
function clicksChart(stats) {
  const w = 640, hgt = 200, pad = 28;
  const max = Math.max(1, ...stats.days.map((d) => d.clicks + d.bot_clicks));
  const bw = (w - pad) / stats.days.length;
  const scale = (n) => ((hgt - pad) * n) / max;
  const bars = stats.days.map((d, i) => {
    const x = pad + i * bw + 1, width = Math.max(1, bw - 2), people = scale(d.clicks), bots = scale(d.bot_clicks);
    const title = `${d.day}: ${d.clicks} clicks, ${d.bot_clicks} bot clicks`;
    return svg("g", {},
      svg("rect", { class: "bar-rect", x, y: hgt - pad - people, width, height: people,
        "data-day": d.day, "data-clicks": d.clicks }, svg("title", {}, title)),
      d.bot_clicks > 0 ? svg("rect", { class: "bot-rect", x, y: hgt - pad - people - bots, width, height: bots,
        "data-day": d.day, "data-bot-clicks": d.bot_clicks }, svg("title", {}, title)) : null);
  });
  const first = stats.days[0]?.day || "", last = stats.days[stats.days.length - 1]?.day || "";
  const chart = svg("svg", { viewBox: `0 0 ${w} ${hgt}`, role: "img", "aria-labelledby": "chart-title", id: "clicks-chart" },
    svg("title", { id: "chart-title" },
      `Clicks per day from ${first} to ${last}: ${stats.total} by people, ${stats.bot_total} by bots`),
    svg("line", { class: "axis", x1: pad, y1: hgt - pad, x2: w, y2: hgt - pad }),
    svg("line", { class: "axis", x1: pad, y1: 0, x2: pad, y2: hgt - pad }),
    svg("text", { x: 2, y: 12 }, String(max)),
    svg("text", { x: 2, y: hgt - pad }, "0"),
    svg("text", { x: pad, y: hgt - 8 }, first),
    svg("text", { x: w - 70, y: hgt - 8 }, last),
    bars);
  const table = h("details", {}, h("summary", {}, "Clicks per day as a table"),
    h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Day"), h("th", { scope: "col" }, "Clicks"),
        h("th", { scope: "col" }, "Bot clicks"))),
      h("tbody", {}, stats.days.map((d) => h("tr", {}, h("td", {}, d.day), h("td", {}, String(d.clicks)),
        h("td", {}, String(d.bot_clicks))))))));
  return h("div", { class: "chart" },
    h("p", { id: "clicks-total" }, `${stats.total} clicks from ${first} to ${last}`),
    h("p", { id: "bot-clicks-total", class: "hint" },
      `and ${stats.bot_total} by bots (link previews, crawlers, HEAD requests), counted apart`),
    h("p", { class: "legend hint", "aria-hidden": "true" },
      h("span", { class: "swatch people" }), "people ", h("span", { class: "swatch bots" }), "bots"),
    chart, table);
}

/** The dimensions a link's clicks break down by, as the API names them, with a label each;
 * the referrer first (the country needs a database the operator may not have set up). */
const DIMENSIONS = [["referrer", "Referrer"], ["country", "Country"], ["device", "Device"], ["browser", "Browser"],
  ["os", "Operating system"], ["utm_source", "Campaign source"], ["utm_medium", "Campaign medium"],
  ["utm_campaign", "Campaign"]];

/** People's clicks by value of one dimension: a bar each (a <meter>: the policy allows no
 * inline style), most clicked first, with the number beside it; a dimension with no clicks
 * in the range says so. */
function breakdownBars(stats) {
  const b = stats.breakdown;
  const label = (DIMENSIONS.find(([name]) => name === b.by) || [b.by, b.by])[1];
  if (b.values.length === 0) {
    return h("p", { id: "breakdown-empty", class: "hint" }, `No clicks by ${label.toLowerCase()} in this range.`);
  }
  const max = Math.max(1, ...b.values.map((v) => v.clicks));
  const rows = b.values.map((v) => h("li", { class: "breakdown-row", "data-value": v.value, "data-clicks": v.clicks },
    h("span", { class: "breakdown-value" }, v.value),
    h("meter", { class: "breakdown-bar", min: 0, max, value: v.clicks, "aria-hidden": "true" }),
    h("span", { class: "breakdown-clicks" }, String(v.clicks))));
  return h("div", { class: "breakdown" },
    h("p", { id: "breakdown-counted", class: "hint" },
      `${b.counted} of ${stats.total} clicks by people broken down by ${label.toLowerCase()}`),
    h("ol", { id: "breakdown-list", "aria-label": `Clicks by ${label.toLowerCase()}` }, rows));
}

/** People's clicks as bars, most clicked first: `rows` of {label (text or element),
 * clicks, data (its data-* attributes)}; `empty` says so when there are none. */
function topBars(id, label, rows, empty) {
  if (rows.length === 0) return h("p", { id: `${id}-empty`, class: "hint" }, empty);
  const max = Math.max(1, ...rows.map((r) => r.clicks));
  return h("div", { class: "breakdown" }, h("ol", { id, "aria-label": label }, rows.map((r) =>
    h("li", { class: "breakdown-row", "data-clicks": r.clicks, ...r.data },
      h("span", { class: "breakdown-value" }, r.label),
      h("meter", { class: "breakdown-bar", min: 0, max, value: r.clicks, "aria-hidden": "true" }),
      h("span", { class: "breakdown-clicks" }, String(r.clicks))))));
}

/** The operators' summary over every domain or one, and a range: clicks per day, and the
 * links, countries and referrers people clicked most (GET /api/v1/stats). */
async function summaryPage(params) {
  if (!isOperator()) return operatorsOnly("Summary");
  page("Summary", h("p", {}, "Loading…"));
  const domains = (await loadDomains()) || [];
  const domain = h("select", { name: "domain" }, h("option", { value: "" }, "Every domain"),
    domains.map((d) => h("option", { value: d.name, selected: d.name === params.get("domain") },
      d.default ? `${d.name} (default)` : d.name)));
  const today = new Date();
  const from = h("input", { type: "date", name: "from", value: isoDay(new Date(today.getTime() - 29 * 86400000)) });
  const to = h("input", { type: "date", name: "to", value: isoDay(today) });
  const out = h("div", { "aria-live": "polite", id: "summary" });
  const values = (list) => list.map((v) => ({ label: v.value, clicks: v.clicks, data: { "data-value": v.value } }));
  const draw = async () => {
    const p = new URLSearchParams();
    if (domain.value) p.set("domain", domain.value);
    if (from.value) p.set("from", from.value);
    if (to.value) p.set("to", to.value);
    try {
      const s = await api("GET", `/api/v1/stats?${p}`);
      const links = s.top_links.map((l) => ({
        // `(other)`: a domain's links beyond the 1,000 a day keeps, no link of its own.
        label: l.code === "(other)" ? `(other) on ${l.domain}`
          : h("a", { href: linkHref(l.code, l.domain) }, domains.length > 1 ? `${l.code} on ${l.domain}` : l.code),
        clicks: l.clicks,
        data: { "data-code": l.code, "data-domain": l.domain },
      }));
      out.replaceChildren(
        h("p", { id: "summary-domains", class: "hint" }, `Links on ${s.domains.join(", ")}`),
        clicksChart(s),
        h("h2", {}, "Top links"),
        topBars("top-links", "Clicks by link", links, "No link was clicked by people in this range."),
        h("h2", {}, "Top countries"),
        topBars("top-countries", "Clicks by country", values(s.top_countries), "No clicks by country in this range."),
        h("h2", {}, "Top referrers"),
        topBars("top-referrers", "Clicks by referrer", values(s.top_referrers), "No clicks by referrer in this range."));
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  const form = h("form", { class: "inline", on: { submit: (e) => { e.preventDefault(); draw(); } } },
    field("Domain", domain), field("From (UTC day)", from), field("To (UTC day)", to),
    h("button", { type: "submit" }, "Show summary"));
  page("Summary",
    h("p", {}, "Clicks per day over every link of a domain, or of every domain, and the links, countries and referrers people clicked most. Kept as the clicks are written: it trails them by the click pacing."),
    form, out);
  draw();
}

async function linkPage(code, domain, saved) {
  page(code, h("p", {}, "Loading…"));
  const base = `/api/v1/links/${encodeURIComponent(code)}`;
  const on = onDomain(domain);
  let link;
  try {
    link = await api("GET", `${base}${on}`);
  } catch (err) {
    page(code, errorBox(err), h("p", {}, h("a", { href: "#/links" }, "Back to the links")));
    return;
  }
  const rules = link.rules || [];
  const copied = h("span", { role: "status", class: "hint" });
  const copy = h("button", { type: "button", on: { click: async () => {
    try {
      await navigator.clipboard.writeText(link.short_url);
      copied.textContent = "Copied.";
    } catch (err) {
      copied.textContent = `Could not copy: ${err.message}`;
    }
  } } }, "Copy short URL");
  const props = h("dl", { class: "props" },
    h("dt", {}, "Short URL"), h("dd", {}, h("a", { href: link.short_url, id: "short-url" }, link.short_url), " ", copy, " ", copied),
    h("dt", {}, "Domain"), h("dd", { id: "link-domain" }, link.domain),
    h("dt", {}, "Target"), h("dd", {}, link.long_url),
    h("dt", {}, "State"), h("dd", { id: "link-state" }, stateBadge(link)),
    h("dt", {}, "Redirect"), h("dd", {}, String(link.redirect)),
    h("dt", {}, "Forwards query"), h("dd", {}, link.forward_query ? "yes" : "no"),
    h("dt", {}, "Password"), h("dd", { id: "link-password" }, link.password_protected ? "yes: visitors enter it first" : "no"),
    h("dt", {}, "Rules"), h("dd", { id: "link-rules" }, rules.length
      ? h("ol", { class: "rule-list" }, rules.map((r) => h("li", {}, ruleText(r))))
      : "none: every visitor goes to the target"),
    h("dt", {}, "Created"), h("dd", {}, `${new Date(link.created_at).toLocaleString()} by ${link.created_by}`),
    h("dt", {}, "Expires"), h("dd", {}, link.expires_at ? new Date(link.expires_at).toLocaleString() : "never"),
    h("dt", {}, "Version"), h("dd", {}, String(link.version)),
    link.deleted_at ? [h("dt", {}, "Deleted"), h("dd", {}, `${new Date(link.deleted_at).toLocaleString()} by ${link.deleted_by}`)] : null,
    link.delete_reason ? [h("dt", {}, "Reason"), h("dd", {}, link.delete_reason)] : null,
  );

  const qr = h("div", { class: "qr" }, h("p", {}, "Loading the QR code…"));
  api("GET", `${base}/qr.svg${on}`, { raw: true })
    .then((res) => res.blob())
    .then((blob) => {
      const url = URL.createObjectURL(blob);
      qr.replaceChildren(
        h("img", { src: url, alt: `QR code of ${link.short_url}`, id: "qr-image" }),
        h("p", {}, h("a", { class: "button", href: url, download: `${code}.svg`, id: "qr-download" }, "Download QR code (SVG)")));
    })
    .catch((err) => qr.replaceChildren(errorBox(err)));

  const today = new Date();
  const from = h("input", { type: "date", name: "from", value: isoDay(new Date(today.getTime() - 29 * 86400000)) });
  const to = h("input", { type: "date", name: "to", value: isoDay(today) });
  const chart = h("div", { "aria-live": "polite" });
  const by = h("select", { name: "by", id: "breakdown-by" },
    DIMENSIONS.map(([name, label]) => h("option", { value: name }, label)));
  const breakdown = h("div", { "aria-live": "polite", id: "breakdown" });
  /** Draws into `into` what `render` makes of the stats over the range (with `extra`). */
  const drawStats = async (into, render, extra = {}) => {
    const p = new URLSearchParams(extra);
    if (from.value) p.set("from", from.value);
    if (to.value) p.set("to", to.value);
    if (domain) p.set("domain", domain);
    try {
      into.replaceChildren(render(await api("GET", `${base}/stats?${p}`)));
    } catch (err) {
      into.replaceChildren(errorBox(err));
    }
  };
  const drawChart = () => drawStats(chart, clicksChart);
  const drawBreakdown = () => drawStats(breakdown, breakdownBars, { by: by.value });
  by.addEventListener("change", drawBreakdown);
  // Which rule chose each person's target, for a link with rules.
  const byRule = h("div", { "aria-live": "polite", id: "rule-breakdown" });
  const drawByRule = () => (rules.length ? drawStats(byRule, (s) => ruleBars(link, s), { by: "rule" }) : null);
  const range = h("form", { class: "inline", on: { submit: (e) => {
    e.preventDefault();
    drawChart();
    drawByRule();
    drawBreakdown();
  } } },
    field("From (UTC day)", from), field("To (UTC day)", to), h("button", { type: "submit" }, "Show clicks"));

  const actions = h("div");
  if (!link.is_active && isOperator() && (link.delete_reason || "").startsWith("threat-list:") && link.deleted_by === "threat-lists") {
    const out = h("div");
    actions.append(h("h2", {}, "Reinstate"),
      h("p", {}, `A threat list (${link.delete_reason.slice("threat-list:".length)}) took this link down. Reinstated, it is served again and no threat list takes it down again.`),
      h("button", { type: "button", class: "primary", on: { click: async () => {
        try {
          await api("POST", `${base}/reinstate${on}`);
          linkPage(code, domain);
        } catch (err) {
          out.replaceChildren(errorBox(err));
        }
      } } }, "Reinstate link"), out);
  }
  if (link.is_active) {
    actions.append(h("h2", {}, "Edit"), editForm(link, base, on, () => linkPage(code, domain)));
    actions.append(h("h2", { id: "rules-heading" }, "Rules"),
      h("p", {}, "Send visitors elsewhere by their country, operating system, device or language, or split them between targets by weight. The first rule that matches a visitor decides; none matching, the target above."),
      h("p", { class: "hint" }, RULE_MATCHING));
    if (saved) actions.append(h("p", { class: "notice", role: "status", tabindex: "-1", id: "rules-saved" }, saved));
    actions.append(rulesForm(link, base, on, (message) => linkPage(code, domain, message)));
    const out = h("div");
    const confirmRow = h("div", { class: "actions", hidden: true },
      h("span", {}, "Delete this link? Visitors will get the not-found page."),
      h("button", { type: "button", class: "danger", id: "confirm-delete", on: { click: async () => {
        try {
          await api("DELETE", `${base}${on}`);
          location.hash = linkHref(code, domain);
          linkPage(code, domain);
        } catch (err) {
          out.replaceChildren(errorBox(err));
        }
      } } }, "Yes, delete"),
      h("button", { type: "button", on: { click: () => { confirmRow.hidden = true; } } }, "Cancel"));
    actions.append(h("h2", {}, "Delete"),
      h("button", { type: "button", class: "danger", on: { click: () => { confirmRow.hidden = false; confirmRow.querySelector("#confirm-delete").focus(); } } }, "Delete link"),
      confirmRow, out);
    if (isOperator()) {
      const reason = h("textarea", { name: "reason", required: true, maxlength: 1000, rows: 2 });
      const tdOut = h("div");
      actions.append(h("h2", {}, "Take down"), h("form", { class: "stack", on: { submit: async (e) => {
        e.preventDefault();
        try {
          await api("POST", `${base}/takedown${on}`, { body: { reason: reason.value } });
          linkPage(code, domain);
        } catch (err) {
          tdOut.replaceChildren(errorBox(err));
        }
      } } }, field("Reason", reason, "Recorded in the audit log with your key and the time."),
        h("div", { class: "actions" }, h("button", { type: "submit", class: "danger" }, "Take down"))), tdOut);
    }
  }
  const audit = h("div");
  if (isOperator()) {
    audit.append(h("h2", {}, "Audit log"));
    api("GET", `${base}/audit${on}`)
      .then((res) => audit.append(auditTable(res.events)))
      .catch((err) => audit.append(errorBox(err)));
  }
  page(`Link ${code}`,
    h("div", { class: "grid2" }, props, qr),
    h("h2", {}, "Clicks"), range, chart,
    rules.length ? h("h3", {}, "By rule") : null, rules.length ? byRule : null,
    h("h3", {}, "Who clicked"), field("Break down by", by), breakdown, actions, audit);
  document.getElementById("rules-saved")?.focus();
  drawChart();
  drawByRule();
  drawBreakdown();
}

/** The edit of an active link at the version shown (If-Match): a change made meanwhile
 *  elsewhere is refused (412) and said so, never overwritten. Only what changed is sent. */
function editForm(link, base, on, done) {
  const longUrl = h("input", { type: "url", name: "edit_long_url", id: "edit-long-url", required: true, value: link.long_url });
  const redirect = h("select", { name: "edit_redirect", id: "edit-redirect" }, [301, 302, 307, 308].map((s) =>
    h("option", { value: s, selected: s === link.redirect }, String(s))));
  const forward = h("input", { type: "checkbox", name: "edit_forward_query", id: "edit-forward" });
  forward.checked = link.forward_query;
  const expiry = h("select", { name: "edit_expiry", id: "edit-expiry" },
    h("option", { value: "keep" }, link.expires_at ? `Keep (${new Date(link.expires_at).toLocaleString()})` : "Keep (never)"),
    h("option", { value: "never" }, "Never"), h("option", { value: "ttl" }, "After a number of seconds from now"));
  const ttl = h("input", { type: "number", name: "edit_ttl_seconds", min: 1, max: 315360000, step: 1 });
  const ttlField = field("Expires after (seconds)", ttl, "1 to 315,360,000 (10 years).");
  const passwordChoice = h("select", { name: "edit_password", id: "edit-password" },
    h("option", { value: "keep" }, link.password_protected ? "Keep the password" : "No password"),
    h("option", { value: "set" }, link.password_protected ? "Change the password" : "Set a password"),
    link.password_protected ? h("option", { value: "remove" }, "Remove the password") : null);
  const newPassword = h("input", { type: "password", name: "edit_new_password", autocomplete: "new-password", minlength: 4, maxlength: 128 });
  const newPasswordField = field("New password", newPassword, "4 to 128 characters; stored hashed, never shown.");
  const showPassword = () => { newPasswordField.hidden = passwordChoice.value !== "set"; };
  passwordChoice.addEventListener("change", showPassword);
  showPassword();
  const showTtl = () => { ttlField.hidden = expiry.value !== "ttl"; };
  expiry.addEventListener("change", showTtl);
  showTtl();
  const out = h("div", { id: "edit-out" });
  return h("form", { class: "stack", id: "edit-form", on: { submit: async (e) => {
    e.preventDefault();
    const body = {};
    if (longUrl.value.trim() !== link.long_url) body.long_url = longUrl.value.trim();
    if (Number(redirect.value) !== link.redirect) body.redirect = Number(redirect.value);
    if (forward.checked !== link.forward_query) body.forward_query = forward.checked;
    if (expiry.value === "never" && link.expires_at) body.expires_at = null;
    if (expiry.value === "ttl" && ttl.value) body.ttl_seconds = Number(ttl.value);
    if (passwordChoice.value === "set" && newPassword.value) body.password = newPassword.value;
    if (passwordChoice.value === "remove") body.password = null;
    if (Object.keys(body).length === 0) {
      out.replaceChildren(notice("Nothing to change."));
      return;
    }
    try {
      await api("PATCH", `${base}${on}`, { body, headers: { "If-Match": `"${link.version}"` } });
      done();
    } catch (err) {
      out.replaceChildren(errorBox(err.status === 412
        ? new ApiError(412, err.code, `Someone changed this link since you opened it (${err.message}). Reload to see the change, then edit again.`)
        : err));
    }
  } } },
    field("Target URL", longUrl, "Once saved, no proxy sends visitors to the old target."),
    field("Redirect status", redirect),
    field("Forward the visitor's query string to the target", forward),
    field("Expiry", expiry), ttlField,
    field("Password", passwordChoice), newPasswordField,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save changes")), out);
}

// ---- rules (docs/spec.md §14) ---------------------------------------------------------

/** The bounds the API holds a link's rules to (core/src/rules.rs), checked here first. */
const RULES_MAX = 20, VARIANTS_MIN = 2, VARIANTS_MAX = 10, WEIGHT_MAX = 10000;
const COUNTRIES_MAX = 250, LANGUAGES_MAX = 32, LANGUAGE_LEN_MAX = 35, TARGET_LEN_MAX = 2048;
/** The operating systems and devices a rule can name, as the API names them, with a label each. */
const RULE_OS = [["ios", "iOS"], ["android", "Android"], ["windows", "Windows"], ["macos", "macOS"],
  ["linux", "Linux"], ["chromeos", "ChromeOS"], ["other", "Other"]];
const RULE_DEVICES = [["desktop", "Desktop"], ["mobile", "Mobile"], ["tablet", "Tablet"], ["other", "Other"]];
const RULE_MATCHING = "A visitor matches a rule when every condition it gives holds (within one, any of its values). A rule without a condition matches everyone, so it can only be the last.";

/** The items of a list typed comma- (or space-) separated, blank ones dropped. */
const itemsOf = (text) => text.split(/[\s,]+/).filter(Boolean);
const unique = (list) => list.filter((x, i) => list.indexOf(x) === i);
const labelOf = (pairs, value) => (pairs.find(([v]) => v === value) || [value, value])[1];

/** A language range as the API takes it: subtags of 1 to 8 letters or digits joined by
 *  "-", the first of letters only, at most 35 characters. */
const isLanguageTag = (tag) => tag.length <= LANGUAGE_LEN_MAX && tag.split("-").every((sub, i) =>
  (i === 0 ? /^[A-Za-z]{1,8}$/ : /^[A-Za-z0-9]{1,8}$/).test(sub));

/** A weight as typed, if it is one (a whole number from 1 to 10,000), else null. */
function weightOf(text) {
  const t = String(text).trim();
  return /^[0-9]{1,5}$/.test(t) && Number(t) >= 1 && Number(t) <= WEIGHT_MAX ? Number(t) : null;
}

const percent = (fraction) => `${Math.round(fraction * 1000) / 10}%`;

/** Each variant's share of a split (its weight over their sum) as text; "—" for a weight
 *  that is not one. */
function shares(split) {
  const weights = split.map((v) => weightOf(v.weight));
  const sum = weights.reduce((a, w) => a + (w || 0), 0);
  return weights.map((w) => (w && sum ? percent(w / sum) : "—"));
}

/** A rule of the API in words: whom it matches, and where it sends them. */
function ruleText(rule) {
  const when = [
    rule.countries?.length ? `country ${rule.countries.join(" or ")}` : null,
    rule.os?.length ? `OS ${rule.os.map((o) => labelOf(RULE_OS, o)).join(" or ")}` : null,
    rule.devices?.length ? `device ${rule.devices.map((d) => labelOf(RULE_DEVICES, d)).join(" or ")}` : null,
    rule.languages?.length ? `language ${rule.languages.join(" or ")}` : null,
  ].filter(Boolean);
  const split = rule.split || [];
  const share = shares(split);
  const to = split.length ? `split: ${split.map((v, i) => `${v.target} (${share[i]})`).join(", ")}` : rule.target;
  return `${when.length ? when.join(" and ") : "every visitor"} → ${to}`;
}

/** What `by=rule` calls `value` (default, N, N/V), in words, from the link's rules as they
 *  are now. */
function ruleLabel(link, value) {
  if (value === "default") return `default → ${link.long_url}`;
  const [r, v] = value.split("/").map(Number);
  const rule = (link.rules || [])[r - 1];
  if (!rule) return `Rule ${value} (no longer on the link)`;
  if (v) {
    const variant = (rule.split || [])[v - 1];
    return variant ? `Rule ${r} · variant ${v} → ${variant.target}` : `Rule ${r} · variant ${v} (no longer on the link)`;
  }
  return rule.target ? `Rule ${r} → ${rule.target}` : `Rule ${r} (a split now)`;
}

/** Where a `by=rule` value sorts: in the rules' order, variants in theirs, default last. */
function ruleOrder(value) {
  if (value === "default") return Number.MAX_SAFE_INTEGER;
  const [r, v] = value.split("/").map(Number);
  return (r || 0) * 100 + (v || 0);
}

/** People's clicks by the rule that chose their target, as bars in the rules' order, each
 *  labelled from the link's rules as they are now, with its clicks and share. */
function ruleBars(link, stats) {
  const values = stats.breakdown.values.slice().sort((a, b) => ruleOrder(a.value) - ruleOrder(b.value));
  if (values.length === 0) {
    return h("p", { id: "rule-breakdown-empty", class: "hint" }, "No clicks by people in this range.");
  }
  const total = values.reduce((a, v) => a + v.clicks, 0);
  const max = Math.max(1, ...values.map((v) => v.clicks));
  return h("div", { class: "breakdown" },
    h("p", { id: "rule-breakdown-counted", class: "hint" },
      `${total} clicks by people in this range, by the rule that chose their target (labelled with the rules as they are now)`),
    h("ol", { id: "rule-breakdown-list", "aria-label": "Clicks by rule" }, values.map((v) => {
      const label = ruleLabel(link, v.value), share = percent(v.clicks / Math.max(1, total));
      return h("li", { class: "breakdown-row rule-row", "data-value": v.value, "data-clicks": v.clicks, "data-share": share },
        h("span", { class: "breakdown-value", title: label }, label),
        h("meter", { class: "breakdown-bar", min: 0, max, value: v.clicks, "aria-hidden": "true" }),
        h("span", { class: "breakdown-clicks" }, String(v.clicks), h("span", { class: "visually-hidden" }, " clicks,")),
        h("span", { class: "breakdown-share" }, share));
    })));
}

/** The editor of a link's rules, from `initial` (the API's): a fieldset per rule in order,
 *  to add, remove and reorder, each with its conditions and one target or a split.
 *  `collect()` checks them by the API's bounds and marks each problem at its field:
 *  {rules (to send; null when there are problems), problems}. `markServer(message)` marks
 *  the field a refusal of the API names (`rules[N].field: …`). */
function rulesEditor(initial) {
  const blankSplit = () => [{ target: "", weight: "50" }, { target: "", weight: "50" }];
  const stateOf = (r = {}) => ({
    countries: (r.countries || []).join(", "),
    os: new Set(r.os || []),
    devices: new Set(r.devices || []),
    languages: (r.languages || []).join(", "),
    mode: r.split && r.split.length ? "split" : "target",
    target: r.target || "",
    split: r.split && r.split.length ? r.split.map((v) => ({ target: v.target, weight: String(v.weight) })) : blankSplit(),
  });
  const states = initial.map(stateOf);
  let marks = new Map(); // a field's key (its control's id) → {control, error}
  const list = h("ol", { class: "rules", id: "rules-list", "aria-label": "Rules, in order: the first that matches a visitor decides" });
  const status = h("p", { class: "visually-hidden", role: "status", id: "rules-status" });
  const say = (text) => { status.textContent = text; };
  const addRule = h("button", { type: "button", id: "add-rule", on: { click: () => {
    states.push(stateOf());
    draw();
    say(`Rule ${states.length} added.`);
    focusId(`rule-${states.length}-countries`);
  } } }, "Add rule");
  const count = h("span", { class: "hint", id: "rules-count" });
  const root = h("div", { class: "rules-editor" }, list, h("div", { class: "actions" }, addRule, count), status);
  const focusId = (id) => root.querySelector(`#${id}`)?.focus();

  /** A labelled control with a slot for its problem, under its id. */
  const withError = (label, control, hint) => {
    const wrap = field(label, control, hint);
    const error = h("span", { class: "field-error", id: `${control.id}-error`, hidden: true });
    wrap.append(error);
    marks.set(control.id, { control, error });
    return wrap;
  };
  const textInput = (id, value, placeholder, set, extra = {}) => h("input", { type: "text", id, value, placeholder,
    autocomplete: "off", spellcheck: "false", ...extra, on: { input: (e) => set(e.target.value) } });

  const drawSplit = (s, n) => {
    const id = `rule-${n}`;
    const outputs = [];
    const update = () => shares(s.split).forEach((t, j) => { outputs[j].textContent = t; });
    const rows = s.split.map((v, j) => {
      const m = j + 1, vid = `${id}-variant-${m}`;
      const target = textInput(`${vid}-target`, v.target, "https://example.com/a", (t) => { v.target = t; }, { inputmode: "url" });
      const weight = textInput(`${vid}-weight`, v.weight, "1 to 10000", (t) => { v.weight = t; update(); }, { inputmode: "numeric" });
      const share = h("output", { id: `${vid}-share`, for: weight.id, class: "share" });
      outputs.push(share);
      return h("li", { class: "variant", id: vid },
        withError(`Variant ${m} target URL`, target),
        withError(`Variant ${m} weight`, weight),
        h("div", { class: "field" }, h("span", { class: "label" }, "Share"), share),
        h("button", { type: "button", id: `${vid}-remove`, on: { click: () => {
          s.split.splice(j, 1);
          draw();
          say(`Variant ${m} of rule ${n} removed.`);
          focusId(`${id}-add-variant`);
        } } }, "Remove", h("span", { class: "visually-hidden" }, ` variant ${m} of rule ${n}`)));
    });
    update();
    const error = h("p", { class: "field-error", id: `${id}-split-error`, hidden: true });
    marks.set(`${id}-split`, { control: null, error });
    return h("div", { class: "split", id: `${id}-split` },
      h("ol", { class: "variants", "aria-label": `Split of rule ${n}` }, rows), error,
      h("div", { class: "actions" },
        h("button", { type: "button", id: `${id}-add-variant`, disabled: s.split.length >= VARIANTS_MAX, on: { click: () => {
          s.split.push({ target: "", weight: "50" });
          draw();
          say(`Variant ${s.split.length} of rule ${n} added.`);
          focusId(`${id}-variant-${s.split.length}-target`);
        } } }, "Add variant", h("span", { class: "visually-hidden" }, ` to rule ${n}`)),
        h("span", { class: "hint" }, `${VARIANTS_MIN} to ${VARIANTS_MAX} variants, weights 1 to 10,000; a variant's share is its weight over their sum, and a visitor keeps seeing the same one.`)));
  };

  const drawRule = (s, i) => {
    const n = i + 1, id = `rule-${n}`;
    const choices = (name, legend, pairs, set) => h("fieldset", { class: "choices row", id: `${id}-${name}` },
      h("legend", {}, legend),
      pairs.map(([value, label]) => field(label, h("input", { type: "checkbox", id: `${id}-${name}-${value}`, value,
        checked: set.has(value), on: { change: (e) => (e.target.checked ? set.add(value) : set.delete(value)) } }))));
    const targetBox = h("div", { class: "rule-target" }, withError("Target URL",
      textInput(`${id}-target`, s.target, "https://example.com/page", (t) => { s.target = t; }, { inputmode: "url" }),
      "Where the visitors this rule matches go: an http or https URL."));
    const splitBox = drawSplit(s, n);
    const showMode = () => {
      targetBox.hidden = s.mode !== "target";
      splitBox.hidden = s.mode !== "split";
    };
    showMode();
    const radio = (value, label) => field(label, h("input", { type: "radio", name: `${id}-mode`, id: `${id}-mode-${value}`, value,
      checked: s.mode === value, on: { change: () => { s.mode = value; showMode(); } } }));
    const error = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
    marks.set(id, { control: null, error });
    const move = (to, word) => () => {
      const [moved] = states.splice(i, 1);
      states.splice(to, 0, moved);
      draw();
      say(`Rule ${n} moved ${word}: it is rule ${to + 1} now.`);
      focusId(to === 0 ? `rule-1-down` : `rule-${to + 1}-up`);
    };
    return h("li", { class: "rule-item" }, h("fieldset", { class: "rule", id },
      h("legend", {}, `Rule ${n}`),
      error,
      h("div", { class: "rule-when" },
        withError("Countries", textInput(`${id}-countries`, s.countries, "DE, NL", (t) => { s.countries = t; }),
          "Two-letter codes (ISO 3166-1), comma-separated."),
        withError("Languages", textInput(`${id}-languages`, s.languages, "fr, pt-BR", (t) => { s.languages = t; }),
          "Language tags, comma-separated; fr also matches fr-CA."),
        choices("os", "Operating systems", RULE_OS, s.os),
        choices("devices", "Devices", RULE_DEVICES, s.devices)),
      h("fieldset", { class: "choices row", id: `${id}-mode` }, h("legend", {}, "Sends the visitors it matches to"),
        radio("target", "One target"), radio("split", "A split by weight")),
      targetBox, splitBox,
      h("div", { class: "actions" },
        h("button", { type: "button", id: `${id}-up`, disabled: i === 0, on: { click: move(i - 1, "up") } },
          "Move up", h("span", { class: "visually-hidden" }, ` (rule ${n})`)),
        h("button", { type: "button", id: `${id}-down`, disabled: i === states.length - 1, on: { click: move(i + 1, "down") } },
          "Move down", h("span", { class: "visually-hidden" }, ` (rule ${n})`)),
        h("button", { type: "button", class: "danger", id: `${id}-remove`, on: { click: () => {
          states.splice(i, 1);
          draw();
          say(`Rule ${n} removed.`);
          focusId(states.length ? `rule-${Math.min(n, states.length)}-countries` : "add-rule");
        } } }, "Remove rule", h("span", { class: "visually-hidden" }, ` ${n}`)))));
  };

  const draw = () => {
    marks = new Map();
    list.replaceChildren(...states.map(drawRule));
    addRule.disabled = states.length >= RULES_MAX;
    count.textContent = states.length === 0
      ? "No rules: every visitor goes to the link's target."
      : `${states.length} of at most ${RULES_MAX} rules. The first that matches a visitor decides; none matching, the link's target.`;
  };

  const clear = () => {
    for (const { control, error } of marks.values()) {
      error.hidden = true;
      error.textContent = "";
      if (control) control.removeAttribute("aria-invalid");
    }
  };
  /** Shows `message` at the field `key`; false when there is no such field. */
  const mark = (key, message) => {
    const m = key && marks.get(key);
    if (!m) return false;
    m.error.textContent = message;
    m.error.hidden = false;
    if (m.control) {
      m.control.setAttribute("aria-invalid", "true");
      const described = (m.control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      if (!described.includes(m.error.id)) m.control.setAttribute("aria-describedby", [...described, m.error.id].join(" "));
    }
    return true;
  };
  /** Focuses the control of the first problem (or its rule's first field). */
  const focusFirst = (problems) => {
    const p = problems.find((x) => x.key);
    if (!p) return;
    const m = marks.get(p.key);
    const rule = p.key.replace(/^(rule-[0-9]+).*$/, "$1");
    if (m && m.control) m.control.focus();
    else if (p.key.endsWith("-split")) focusId(`${rule}-add-variant`);
    else focusId(`${rule}-countries`);
  };

  const collect = () => {
    clear();
    const problems = [];
    const problem = (key, where, message) => problems.push({ key, where, message });
    if (states.length > RULES_MAX) problem(null, "", `A link has at most ${RULES_MAX} rules, not ${states.length}.`);
    const languagesSeen = [];
    const rules = states.map((s, i) => {
      const n = i + 1, id = `rule-${n}`, rule = {};
      const countries = itemsOf(s.countries);
      const badCountry = countries.find((c) => !/^[A-Za-z]{2}$/.test(c));
      if (badCountry) {
        problem(`${id}-countries`, `Rule ${n}, countries`, `“${badCountry}” is not a two-letter country code (ISO 3166-1, like DE).`);
      } else if (countries.length > COUNTRIES_MAX) {
        problem(`${id}-countries`, `Rule ${n}, countries`, `At most ${COUNTRIES_MAX} countries, not ${countries.length}.`);
      }
      if (countries.length) rule.countries = unique(countries.map((c) => c.toUpperCase()));
      const os = RULE_OS.map(([v]) => v).filter((v) => s.os.has(v));
      if (os.length) rule.os = os;
      const devices = RULE_DEVICES.map(([v]) => v).filter((v) => s.devices.has(v));
      if (devices.length) rule.devices = devices;
      const languages = itemsOf(s.languages);
      const badLanguage = languages.find((l) => !isLanguageTag(l));
      if (badLanguage) {
        problem(`${id}-languages`, `Rule ${n}, languages`,
          `“${badLanguage}” is not a language tag (like fr or pt-BR: subtags of 1 to 8 letters or digits joined by -, the first of letters, at most ${LANGUAGE_LEN_MAX} characters).`);
      } else if (languages.length > LANGUAGES_MAX) {
        problem(`${id}-languages`, `Rule ${n}, languages`, `At most ${LANGUAGES_MAX} languages, not ${languages.length}.`);
      }
      if (languages.length) rule.languages = unique(languages.map((l) => l.toLowerCase()));
      for (const l of rule.languages || []) if (!languagesSeen.includes(l)) languagesSeen.push(l);
      if (s.mode === "target") {
        rule.target = s.target.trim();
        if (!rule.target) problem(`${id}-target`, `Rule ${n}, target`, "Give the URL this rule sends its visitors to.");
        else if (rule.target.length > TARGET_LEN_MAX) problem(`${id}-target`, `Rule ${n}, target`, `At most ${TARGET_LEN_MAX} characters.`);
      } else {
        const k = s.split.length;
        if (k < VARIANTS_MIN || k > VARIANTS_MAX) {
          problem(`${id}-split`, `Rule ${n}, split`, `A split has ${VARIANTS_MIN} to ${VARIANTS_MAX} variants, not ${k}: ` +
            (k < VARIANTS_MIN ? "add a variant, or send to one target instead." : "remove some."));
        }
        rule.split = s.split.map((v, j) => {
          const vid = `${id}-variant-${j + 1}`, where = `Rule ${n}, variant ${j + 1}`;
          const target = v.target.trim(), weight = weightOf(v.weight);
          if (!target) problem(`${vid}-target`, where, "Give the variant's target URL.");
          else if (target.length > TARGET_LEN_MAX) problem(`${vid}-target`, where, `At most ${TARGET_LEN_MAX} characters.`);
          if (weight === null) {
            const typed = String(v.weight).trim();
            problem(`${vid}-weight`, where, `A weight is a whole number from 1 to 10,000${typed ? `, not ${typed}` : ""}.`);
          }
          return { target, weight };
        });
      }
      if (!rule.countries && !rule.os && !rule.devices && !rule.languages && i < states.length - 1) {
        problem(id, `Rule ${n}`, `It has no condition, so it matches every visitor and the rules after it could never match: give it a condition, or move it last.`);
      }
      return rule;
    });
    if (languagesSeen.length > LANGUAGES_MAX) {
      problem(null, "", `The rules name at most ${LANGUAGES_MAX} different languages, not ${languagesSeen.length}.`);
    }
    for (const p of problems) mark(p.key, p.message);
    return { rules: problems.length ? null : rules, problems };
  };

  /** Marks the field an API refusal names (`rules[2].countries: …`,
   *  `rules[3].split[2].target must be …`, `rules[2]: …`), and focuses it. */
  const markServer = (message) => {
    const m = /^rules\[([0-9]+)\](?:\.([^:\s]+))?:?\s+(.*)$/.exec(message || "");
    if (!m) return;
    const id = `rule-${m[1]}`;
    const key = m[2] ? `${id}-${m[2].replace(/^split\[([0-9]+)\]\./, "variant-$1-")}` : id;
    const at = marks.has(key) ? key : id;
    mark(at, m[3]);
    focusFirst([{ key: at }]);
  };

  draw();
  return { element: root, collect, markServer, focusFirst };
}

/** What went wrong with rules before anything was sent, each where it is. */
function problemsBox(problems) {
  return h("div", { class: "error", role: "alert", id: "rules-problems" },
    h("p", {}, problems.length === 1 ? "1 problem with the rules; nothing was sent:" : `${problems.length} problems with the rules; nothing was sent:`),
    h("ul", {}, problems.map((p) => h("li", {}, p.where ? `${p.where}: ${p.message}` : p.message))));
}

/** The rules of an active link, edited and saved at the version shown (If-Match): a change
 *  made meanwhile elsewhere is refused (412) and said so, never overwritten. Checked here
 *  before anything is sent; a refusal of the API is shown in its words, at its field. */
function rulesForm(link, base, on, done) {
  const editor = rulesEditor(link.rules || []);
  const out = h("div", { id: "rules-out", "aria-live": "polite" });
  const saveButton = h("button", { type: "submit", class: "primary" }, "Save rules");
  return h("form", { class: "rules-form", id: "rules-form", novalidate: true, on: { submit: async (e) => {
    e.preventDefault();
    const { rules, problems } = editor.collect();
    if (!rules) {
      out.replaceChildren(problemsBox(problems));
      editor.focusFirst(problems);
      return;
    }
    if (JSON.stringify(rules) === JSON.stringify(link.rules || [])) {
      out.replaceChildren(notice("Nothing to change."));
      return;
    }
    out.replaceChildren(h("p", { class: "hint" }, "Saving…"));
    saveButton.disabled = true;
    try {
      const saved = await api("PATCH", `${base}${on}`, { body: { rules }, headers: { "If-Match": `"${link.version}"` } });
      const n = rules.length === 1 ? "1 rule" : `${rules.length} rules`;
      done(rules.length ? `Rules saved: ${n}, version ${saved.version}. Every proxy answers by them now.` : "Rules removed.");
    } catch (err) {
      saveButton.disabled = false;
      if (err.status === 412) {
        out.replaceChildren(errorBox(new ApiError(412, err.code,
          `Someone changed this link since you opened it (${err.message}). Nothing was saved: reload to see the change, then edit the rules again.`)),
        h("button", { type: "button", id: "rules-reload", on: { click: () => done() } }, "Reload the link"));
      } else {
        out.replaceChildren(errorBox(err));
        editor.markServer(err.message);
      }
    }
  } } },
    editor.element,
    h("div", { class: "actions" }, saveButton), out);
}

/** What an edit changed, as `field: old → new` lines. */
function changeText(e) {
  if (!e.old || !e.new) return "";
  return Object.keys(e.new).map((k) => `${k}: ${JSON.stringify(e.old[k])} → ${JSON.stringify(e.new[k])}`).join("\n");
}

/** A domain's certificate state, and what goes with it: the expiry of an issued one, why
 *  the last order failed. */
function domainState(d) {
  const when = (t) => new Date(t).toLocaleString();
  const detail = {
    pending: "no certificate yet" + (d.certificate_attempt_at ? `; last tried ${when(d.certificate_attempt_at)}` : ""),
    issued: d.certificate_expires_at ? `expires ${when(d.certificate_expires_at)}` : "",
    failing: [d.certificate_error, d.certificate_expires_at ? `the certificate expires ${when(d.certificate_expires_at)}` : null,
      d.certificate_attempt_at ? `last tried ${when(d.certificate_attempt_at)}` : null].filter(Boolean).join("; "),
    files: "from the TLS port's certificate files",
    none: "no TLS port with ACME",
  }[d.state] || "";
  return [h("span", { class: `state state-${d.state}` }, d.state), detail ? h("span", { class: "hint state-detail" }, ` ${detail}`) : null];
}

function domainPages(d) {
  const pages = [["Not found", d.not_found_url], ["Expired", d.expired_url], ["Root", d.root_url]].filter(([, u]) => u);
  if (pages.length === 0) return "built-in pages";
  return h("ul", { class: "plain" }, pages.map(([what, u]) => h("li", {}, `${what}: `, h("span", { class: "target" }, u))));
}

/** Which app links documents a domain serves. */
function domainAppLinks(d) {
  const served = [["Apple", d.apple_app_site_association], ["Android", d.assetlinks]].filter(([, doc]) => doc != null);
  return served.length ? served.map(([what]) => what).join(", ") : "none";
}

async function domainsPage() {
  if (!isOperator()) return operatorsOnly("Domains");
  const list = h("div", { "aria-live": "polite" }, h("p", {}, "Loading…"));
  const removed = h("div", { "aria-live": "polite" });

  // App links: the two documents of one domain, edited as JSON (empty: none served).
  const appleDoc = h("textarea", { name: "apple_app_site_association", rows: 8, spellcheck: "false",
    placeholder: '{"applinks": {"details": [{"appIDs": ["TEAMID.com.example.app"], "components": [{"/": "/*"}]}]}}' });
  const androidDoc = h("textarea", { name: "assetlinks", rows: 8, spellcheck: "false",
    placeholder: '[{"relation": ["delegate_permission/common.handle_all_urls"], "target": {"namespace": "android_app", "package_name": "com.example.app", "sha256_cert_fingerprints": ["…"]}}]' });
  const appLinksTitle = h("h2", { id: "app-links-title", tabindex: "-1" });
  const appLinksOut = h("div", { "aria-live": "polite" });
  let editing = null;
  const appLinksForm = h("form", { class: "stack", id: "app-links-form", hidden: true,
    "aria-labelledby": "app-links-title", on: { submit: async (e) => {
    e.preventDefault();
    const body = {};
    for (const [k, el] of [["apple_app_site_association", appleDoc], ["assetlinks", androidDoc]]) {
      const text = el.value.trim();
      try {
        body[k] = text ? JSON.parse(text) : null;
      } catch (err) {
        appLinksOut.replaceChildren(errorBox(new Error(`${k} is not JSON: ${err.message}`)));
        el.focus();
        return;
      }
    }
    try {
      const d = await api("PUT", `/api/v1/domains/${encodeURIComponent(editing)}/app-links`, { body });
      appLinksOut.replaceChildren(notice(`App links of ${d.name} saved (${domainAppLinks(d)}). Every proxy serves them within seconds.`));
      await drawList();
    } catch (err) {
      appLinksOut.replaceChildren(errorBox(err));
    }
  } } },
    appLinksTitle,
    field("Apple app-site-association (optional)", appleDoc, "A JSON object, served at /.well-known/apple-app-site-association. Empty: none (404)."),
    field("Android asset links (optional)", androidDoc, "A JSON array of statements, served at /.well-known/assetlinks.json. Empty: none (404)."),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save app links"),
      h("button", { type: "button", on: { click: () => { appLinksForm.hidden = true; } } }, "Close")),
    appLinksOut);
  const editAppLinks = (d) => {
    editing = d.name;
    appLinksTitle.textContent = `App links of ${d.name}`;
    const pretty = (doc) => (doc == null ? "" : JSON.stringify(doc, null, 2));
    appleDoc.value = pretty(d.apple_app_site_association);
    androidDoc.value = pretty(d.assetlinks);
    appLinksOut.replaceChildren();
    appLinksForm.hidden = false;
    appLinksTitle.focus();
  };

  // Removing asks first; a domain with active links is removed only when told to take
  // them down too.
  const confirmText = h("span");
  const takeDown = h("input", { type: "checkbox", name: "take_down", id: "take-down" });
  const takeDownField = field("Take its links down too", takeDown, "Each is recorded in the audit log as a takedown.");
  const confirmOut = h("div");
  let removing = null;
  const confirmBox = h("div", { class: "confirm", hidden: true, role: "group", "aria-labelledby": "confirm-remove-text" },
    h("p", { id: "confirm-remove-text" }, confirmText), confirmOut, takeDownField,
    h("div", { class: "actions" },
      h("button", { type: "button", class: "danger", id: "confirm-remove", on: { click: async () => {
        const p = takeDown.checked ? "?take_down=true" : "";
        try {
          const r = await api("DELETE", `/api/v1/domains/${encodeURIComponent(removing)}${p}`);
          confirmBox.hidden = true;
          const links = r.taken_down === 1 ? "1 link" : `${r.taken_down} links`;
          removed.replaceChildren(notice(`Domain ${r.name} removed` + (r.taken_down ? `; ${links} taken down.` : ".")));
          await drawList();
          document.getElementById("page-title").focus();
        } catch (err) {
          confirmOut.replaceChildren(errorBox(err));
          if (err.code === "domain_has_links") {
            takeDownField.hidden = false;
            takeDown.focus();
          }
        }
      } } }, "Yes, remove"),
      h("button", { type: "button", on: { click: () => { confirmBox.hidden = true; } } }, "Cancel")));
  const askRemove = (name) => {
    removing = name;
    confirmText.textContent = `Remove the domain ${name}? Its links stop redirecting, and its name stops being served.`;
    takeDown.checked = false;
    takeDownField.hidden = true;
    confirmOut.replaceChildren();
    removed.replaceChildren();
    confirmBox.hidden = false;
    document.getElementById("confirm-remove").focus();
  };

  const drawList = async () => {
    try {
      const { domains } = await api("GET", "/api/v1/domains");
      list.replaceChildren(h("div", { class: "scroll" }, h("table", { id: "domains-table" },
        h("thead", {}, h("tr", {}, ["Name", "Certificate", "State", "Pages", "App links", "Added", ""].map((t) =>
          t ? h("th", { scope: "col" }, t) : h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions"))))),
        h("tbody", {}, domains.map((d) => h("tr", { "data-domain": d.name },
          h("th", { scope: "row" }, d.name, d.default ? h("span", { class: "hint" }, " (default)") : null),
          h("td", {}, d.certificate),
          h("td", { class: "domain-state" }, domainState(d)),
          h("td", {}, domainPages(d)),
          h("td", { class: "domain-app-links" }, domainAppLinks(d)),
          h("td", {}, d.created_at ? `${new Date(d.created_at).toLocaleString()} by ${d.created_by}` : "—"),
          h("td", {}, h("button", { type: "button", "aria-label": `App links of ${d.name}`,
            on: { click: () => editAppLinks(d) } }, "App links"),
            d.default ? null : " ",
            d.default ? null : h("button", { type: "button", class: "danger", "aria-label": `Remove ${d.name}`,
            on: { click: () => askRemove(d.name) } }, "Remove"))))))));
    } catch (err) {
      list.replaceChildren(errorBox(err));
    }
  };

  const name = h("input", { type: "text", name: "name", required: true, maxlength: 253, autocomplete: "off",
    spellcheck: "false", placeholder: "go.example.com" });
  const certificate = h("select", { name: "certificate" },
    h("option", { value: "acme" }, "ACME: ordered and renewed automatically"),
    h("option", { value: "files" }, "Files: the TLS port's certificate files"));
  const pageUrl = (n) => h("input", { type: "url", name: n, placeholder: "https://example.com/" });
  const notFound = pageUrl("not_found_url"), expired = pageUrl("expired_url"), root = pageUrl("root_url");
  const added = h("div", { "aria-live": "polite" });
  const addForm = h("form", { class: "stack", on: { submit: async (e) => {
    e.preventDefault();
    const body = { name: name.value.trim(), certificate: certificate.value };
    for (const [k, el] of [["not_found_url", notFound], ["expired_url", expired], ["root_url", root]]) {
      if (el.value.trim()) body[k] = el.value.trim();
    }
    try {
      const d = await api("POST", "/api/v1/domains", { body });
      added.replaceChildren(notice(`Domain ${d.name} added (${d.state}). Every proxy routes it within seconds.`));
      addForm.reset();
      await drawList();
    } catch (err) {
      added.replaceChildren(errorBox(err));
      name.focus();
    }
  } } },
    field("Domain name", name, "A DNS name of two labels or more; point its DNS at the proxies."),
    field("Certificate", certificate, "ACME needs a TLS port with ACME; with files, the certificate is yours to install."),
    field("Not-found page URL (optional)", notFound, "Where a code this domain does not have, or a deleted or taken-down link of it, redirects. Empty: the built-in 404 page."),
    field("Expired page URL (optional)", expired, "Where an expired link redirects. Empty: the built-in 410 page."),
    field("Root page URL (optional)", root, "Where / of this domain redirects. Empty: the built-in page."),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Add domain")));

  page("Domains", h("p", {}, "The hosts short links are served on, with the state of each one's certificate."),
    list, confirmBox, removed, appLinksForm, h("h2", {}, "Add a domain"), addForm, added);
  await drawList();
}

function auditTable(events) {
  if (events.length === 0) return h("p", {}, "Nothing recorded.");
  return h("div", { class: "scroll" }, h("table", { class: "audit" },
    h("thead", {}, h("tr", {}, ["Time", "Action", "Actor", "Reason", "Change", "Outcome"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, events.map((e) => h("tr", {},
      h("td", {}, new Date(e.at).toLocaleString()), h("td", {}, e.action), h("td", {}, e.actor),
      h("td", {}, e.reason || ""), h("td", { class: "change" }, changeText(e)), h("td", {}, e.outcome))))));
}

function operatorsOnly(title) {
  page(title, h("p", { class: "error", role: "alert" }, "This page is for operator keys. Sign in with an operator key to use it."));
}

async function keysPage() {
  if (!isOperator()) return operatorsOnly("API keys");
  page("API keys", h("p", {}, "Loading…"));
  const domains = (await loadDomains()) || [];
  const name = h("input", { type: "text", name: "name", required: true, maxlength: 100 });
  const role = h("select", { name: "role" }, h("option", { value: "creator" }, "creator"), h("option", { value: "operator" }, "operator"));
  // A creator key may be scoped to some domains (none ticked: every domain).
  const scopes = domains.map((d) => h("input", { type: "checkbox", name: "domains", value: d.name }));
  const scope = domains.length
    ? h("fieldset", { class: "choices", "aria-describedby": "scope-hint" },
      h("legend", {}, "Domains it may use (optional)"),
      h("span", { class: "hint", id: "scope-hint" },
        "For a creator key. None ticked: every domain. Its links go on the first ticked one unless they name another."),
      domains.map((d, i) => field(d.default ? `${d.name} (default)` : d.name, scopes[i])))
    : null;
  const showScope = () => { if (scope) scope.hidden = role.value !== "creator"; };
  role.addEventListener("change", showScope);
  showScope();
  const created = h("div", { "aria-live": "polite" });
  const createForm = h("form", { class: "stack", on: { submit: async (e) => {
    e.preventDefault();
    const body = { name: name.value, role: role.value };
    const ticked = scopes.filter((c) => c.checked).map((c) => c.value);
    if (role.value === "creator" && ticked.length) body.domains = ticked;
    try {
      const k = await api("POST", "/api/v1/keys", { body });
      const on = k.domains ? `, on ${k.domains.join(", ")} only` : "";
      created.replaceChildren(notice(`Key ${k.id} (${k.role}${on}) created. Copy it now: it is shown only this once.`),
        h("p", { class: "secret", id: "new-key" }, k.key));
    } catch (err) {
      created.replaceChildren(errorBox(err));
    }
  } } }, field("Name", name, "Who or what the key is for."), field("Role", role), scope,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create key")));
  const id = h("input", { type: "text", name: "id", required: true, autocomplete: "off" });
  const revoked = h("div", { "aria-live": "polite" });
  const revokeForm = h("form", { class: "stack", on: { submit: async (e) => {
    e.preventDefault();
    try {
      await api("DELETE", `/api/v1/keys/${encodeURIComponent(id.value.trim())}`);
      revoked.replaceChildren(notice(`Key ${id.value.trim()} revoked; it stopped working at once.`));
    } catch (err) {
      revoked.replaceChildren(errorBox(err));
    }
  } } }, field("Key id", id, "The id shown when the key was created (not the key itself)."),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "danger" }, "Revoke key")));
  page("API keys", h("h2", {}, "Create a key"), createForm, created, h("h2", {}, "Revoke a key"), revokeForm, revoked);
}

async function auditPage(params) {
  if (!isOperator()) return operatorsOnly("Audit log");
  const domains = (await loadDomains()) || [];
  const code = h("input", { type: "text", name: "code", required: true, value: params.get("code") || "", autocomplete: "off" });
  const domain = domains.length > 1 ? domainSelect("domain", domains, params.get("domain") || preferredDomain(domains)) : null;
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "inline", on: { submit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams({ code: code.value.trim() });
    if (domain && !domains.find((d) => d.name === domain.value)?.default) p.set("domain", domain.value);
    location.hash = `#/audit?${p}`;
  } } }, field("Link code", code), domain ? field("Domain", domain) : null, h("button", { type: "submit" }, "Show"));
  page("Audit log", h("p", {}, "Every delete, takedown and edit of a link: who, when, why, what changed and with what outcome."), form, out);
  if (params.get("code")) {
    api("GET", `/api/v1/links/${encodeURIComponent(params.get("code"))}/audit${onDomain(params.get("domain"))}`)
      .then((res) => out.replaceChildren(h("h2", {}, `Link ${res.code}`), auditTable(res.events)))
      .catch((err) => out.replaceChildren(errorBox(err)));
  }
}

/** The threat lists in force (and the last rescan) and the abuse reports, for operators. */
async function abusePage() {
  if (!isOperator()) return operatorsOnly("Abuse");
  page("Abuse", h("p", {}, "Loading…"));
  let lists, reports;
  try {
    [lists, reports] = await Promise.all([api("GET", "/api/v1/threat-lists"), api("GET", "/api/v1/abuse-reports")]);
  } catch (err) {
    page("Abuse", errorBox(err));
    return;
  }
  const when = (t) => (t ? new Date(t).toLocaleString() : "never");
  const listTable = lists.lists.length === 0
    ? h("p", {}, "No threat list is configured (threats.lists).")
    : h("div", { class: "scroll" }, h("table", { id: "threat-lists" },
      h("thead", {}, h("tr", {}, ["List", "Format", "Source", "Entries", "Loaded", "Last load"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, lists.lists.map((l) => h("tr", { "data-list": l.name },
        h("td", {}, l.name), h("td", {}, l.format), h("td", { class: "target" }, l.source),
        h("td", {}, String(l.entries)), h("td", {}, when(l.loaded_at)),
        h("td", {}, l.error ? h("span", { class: "error" }, `failed: ${l.error}`) : "ok"))))));
  const rescan = lists.last_rescan_at
    ? h("p", { id: "last-rescan" }, `Last check of every link: ${when(lists.last_rescan_at)}, ${lists.last_rescan_scanned} links read, ${lists.last_rescan_taken_down} taken down.`)
    : h("p", { id: "last-rescan" }, "No check of the links against the lists yet.");
  const reportTable = reports.reports.length === 0
    ? h("p", {}, "No reports.")
    : h("div", { class: "scroll" }, h("table", { id: "reports" },
      h("thead", {}, h("tr", {}, ["Time", "Link", "Reporter", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, reports.reports.map((r) => h("tr", {},
        h("td", {}, when(r.at)),
        h("td", {}, h("a", { href: linkHref(r.code, domainOf(r.short_url)) }, r.short_url || r.code)),
        h("td", {}, r.reporter), h("td", { class: "change" }, r.reason))))));
  page("Abuse",
    h("p", {}, "Links whose target a threat list holds are taken down automatically (reason threat-list:<name>); a link taken down by mistake can be reinstated from its page. Anyone can report a link; the newest reports are below."),
    h("h2", {}, "Threat lists"), listTable, rescan,
    h("h2", {}, "Reports"), reportTable);
}

/** The host of a short URL, or none. */
function domainOf(shortUrl) {
  try {
    return new URL(shortUrl).hostname;
  } catch (_) {
    return null;
  }
}

// ---- routing --------------------------------------------------------------------------

async function route() {
  const [path, query] = (location.hash.slice(1) || "/links").split("?");
  const params = new URLSearchParams(query || "");
  if (!sessionStorage.getItem(KEY_SLOT)) {
    drawNav("signin");
    return signInPage();
  }
  if (!me) {
    try {
      me = await api("GET", "/api/v1/me");
    } catch (err) {
      signOut();
      drawNav("signin");
      return signInPage(err.message);
    }
  }
  const parts = path.split("/").filter(Boolean);
  const name = parts[0] || "links";
  drawNav(name === "links" && parts[1] ? "" : name);
  if (name === "links" && parts[1]) return linkPage(decodeURIComponent(parts[1]), params.get("domain"));
  if (name === "new") return newLinkPage();
  if (name === "stats") return summaryPage(params);
  if (name === "domains") return domainsPage();
  if (name === "keys") return keysPage();
  if (name === "audit") return auditPage(params);
  if (name === "abuse") return abusePage();
  if (name === "signin") {
    location.hash = "#/links";
    return;
  }
  return linksPage(params);
}

window.addEventListener("hashchange", route);
route();
