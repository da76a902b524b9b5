// Headless Chromium (Debian's package) via playwright-core: the Ablations tab.
// Runs GOOD to completion, then starts BAD and reads the error lines; screenshots both.
// Usage: node tests/browser/ablations.mjs BASE_URL API_KEY GOOD BAD SHOT_DIR  → prints one JSON line.
import { chromium } from "playwright-core";

const [base, key, good, bad, shots] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
const out = { console_errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  page.on("pageerror", (err) => out.console_errors.push(String(err)));
  page.on("console", (msg) => { if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) out.console_errors.push(msg.text()); });
  await page.goto(base + "/", { waitUntil: "domcontentloaded" });
  await page.fill("#api-key", key);
  await page.click("#tab-ablations");
  await page.waitForSelector(`#abl-dataset option[value="${good}"]`, { state: "attached", timeout: 15000 });
  out.datasets = await page.$$eval("#abl-dataset option", (os) => os.map((o) => o.value));
  await page.selectOption("#abl-dataset", good);
  await page.uncheck('#abl-conditions input[value="cot"]');
  // the local corpus is empty: search_cot/kar are refused (422 no_evidence) unless the user allows it
  await page.check("#abl-allow-no-evidence");
  await page.click("#abl-start");
  await page.waitForSelector("#abl-table tbody tr", { timeout: 15000 });
  out.first_status = await page.textContent("#abl-table tbody tr .status");
  await page.waitForSelector("#abl-table tbody tr .status-succeeded, #abl-table tbody tr .status-failed", { timeout: 120000 });
  const row = "#abl-table tbody tr";
  out.status = await page.textContent(row + " .status");
  out.progress = await page.textContent(row + " .done");
  out.per_condition = await page.$$eval(row + " .cond", (els) => els.map((e) => e.textContent));
  out.prediction_links = await page.$$eval(row + " a.abl-predictions", (as) => as.map((a) => a.getAttribute("href")));
  out.predictions = await page.evaluate(async (hrefs) => {
    const res = {};
    for (const h of hrefs) { const r = await fetch(h); res[h] = r.ok ? await r.json() : r.status; }
    return res;
  }, out.prediction_links);
  await page.screenshot({ path: shots + "/ablations-done.png", fullPage: true });
  await page.selectOption("#abl-dataset", bad);
  await page.click("#abl-start");
  await page.waitForSelector("#abl-error:not([hidden])", { timeout: 15000 });
  out.error_text = await page.textContent("#abl-error");
  out.error_elements = await page.$$eval("#abl-error *", (els) => els.length);
  out.rows_after_bad = await page.$$eval("#abl-table tbody tr", (trs) => trs.length);
  await page.screenshot({ path: shots + "/ablations-bad.png", fullPage: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
