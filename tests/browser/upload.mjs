// Headless Chromium (Debian's package) via playwright-core: upload an image on the web page,
// wait for the stages and the grounded entities, then try the knowledge-base tab.
// Usage: node tests/browser/upload.mjs BASE_URL IMAGE_PATH  → prints one JSON line.
import { chromium } from "playwright-core";

const [base, image] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
const out = { console_errors: [] };
try {
  const page = await browser.newPage();
  page.on("pageerror", (err) => out.console_errors.push(String(err)));
  page.on("console", (msg) => { if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource")) out.console_errors.push(msg.text()); });
  await page.goto(base + "/", { waitUntil: "domcontentloaded" });
  out.title = await page.title();
  await page.setInputFiles("#file", image);
  await page.selectOption("#condition", "kar");
  await page.click("#run");
  await page.waitForSelector(".stage-final", { timeout: 30000 });
  out.stages = await page.$$eval("#stages li", (lis) => lis.map((li) => li.textContent));
  out.entities = await page.$$eval("#entities li .name", (els) => els.map((e) => e.textContent));
  out.scores = await page.$$eval("#entities li .score", (els) => els.map((e) => Number(e.textContent)));
  out.source_links = await page.$$eval("#entities li a", (els) => els.map((a) => a.href));
  out.evidence_links = await page.$$eval("#evidence a", (els) => els.map((a) => a.href));
  out.evidence_why = await page.$$eval("#evidence .why", (els) => els.map((e) => e.textContent));
  out.evidence_none = await page.$eval("#evidence", (box) => { const n = box.querySelector(".none-reason"); return n ? n.textContent : null; });
  out.explanation = await page.textContent("#explanation");
  out.timings = await page.textContent("#timings");
  out.template_match = await page.evaluate(async () => {
    const fig = document.getElementById("template-match"), img = document.getElementById("template-img");
    if (fig.hidden) return null;
    await img.decode().catch(() => {});
    return { src: img.getAttribute("src"), caption: document.getElementById("template-caption").textContent, loaded: img.naturalWidth > 0 };
  });
  await page.click("#tab-kb");
  await page.fill("#kb-q", "Doge");
  await page.click("#kb-form button");
  await page.waitForSelector("#kb-results li .name", { timeout: 15000 });
  out.kb_results = await page.$$eval("#kb-results li .name", (els) => els.map((e) => e.textContent));
  out.kb_routes = await page.$$eval("#kb-results li .route", (els) => els.map((e) => e.textContent));
  out.kb_stats = await page.textContent("#kb-stats");
  await page.click("#tab-crawl");
  await page.click("#crawl-form button");
  await page.waitForSelector("#crawl-error:not([hidden])", { timeout: 15000 });
  out.crawl_error = await page.textContent("#crawl-error");
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
