// Headless Chromium: upload while the server's explain queue is full → the page shows "busy, retry in N s".
// Usage: node tests/browser/busy.mjs BASE_URL IMAGE_PATH  → prints one JSON line.
import { chromium } from "playwright-core";

const [base, image] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
const out = { console_errors: [] };
try {
  const page = await browser.newPage();
  page.on("pageerror", (err) => out.console_errors.push(String(err)));
  await page.goto(base + "/", { waitUntil: "domcontentloaded" });
  await page.setInputFiles("#file", image);
  await page.click("#run");
  await page.waitForSelector("#error:not([hidden])", { timeout: 30000 });
  out.error = await page.textContent("#error");
  out.stages = await page.$$eval("#stages li", (lis) => lis.map((li) => li.textContent));
  out.run_enabled = !(await page.isDisabled("#run"));
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
