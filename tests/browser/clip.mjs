// Headless Chromium via playwright-core: upload a clip on the web page, wait for the final answer,
// report the player and the sampled frames shown.
// Usage: node tests/browser/clip.mjs BASE_URL CLIP_PATH  → prints one JSON line.
import { chromium } from "playwright-core";

const [base, clip] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
const out = { console_errors: [] };
try {
  const page = await browser.newPage();
  page.on("pageerror", (err) => out.console_errors.push(String(err)));
  await page.goto(base + "/", { waitUntil: "domcontentloaded" });
  await page.setInputFiles("#file", clip);
  out.player = await page.evaluate(() => {
    const v = document.getElementById("player");
    return { hidden: v.hidden, has_src: Boolean(v.getAttribute("src")), image_hidden: document.getElementById("preview").hidden };
  });
  await page.click("#run");
  await page.waitForSelector(".stage-final", { timeout: 60000 });
  out.media_hidden = await page.evaluate(() => document.getElementById("media-box").hidden);
  out.summary = await page.textContent("#media-summary");
  out.frames = await page.$$eval("#frames figure", (figs) => figs.map((f) => ({
    caption: f.querySelector("figcaption").textContent,
    src: f.querySelector("img").getAttribute("src").slice(0, 23),
  })));
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
