// The web chat page at GET /, in a real browser: Debian's chromium, headless, driven by puppeteer-core. The page
// loads from the binary (no request leaves the server), names the model, sends a typed prompt with the settings
// (system prompt, temperature 0, max tokens), streams the reply into the conversation, shows its stats line; the
// reply is the text /v1/chat/completions gives for the same request; Stop ends a long reply early. A screenshot
// goes to $SHOT (default chat-page.png in the current directory).
// Usage: GEN_URL=... API_KEY=... [CHROMIUM=/usr/bin/chromium] [SHOT=...] node test_chat_page.mjs
import puppeteer from 'puppeteer-core';
import { existsSync } from 'node:fs';

const exe = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(exe)) { console.log(`SKIP: no browser at ${exe} (the README's install line installs Debian's chromium)`); process.exit(0); }
let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const url = process.env.GEN_URL, key = process.env.API_KEY;
const browser = await puppeteer.launch({ executablePath: exe, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'] });
try {
  const page = await browser.newPage();
  const foreign = [];
  page.on('request', (r) => { if (!r.url().startsWith(url)) foreign.push(r.url()); });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url + '/', { waitUntil: 'load' });
  check('GET / is the chat page', (await page.title()) === 'hearth');
  // settings, as a user sets them
  await page.type('#key', key);
  await page.$eval('#key', (e) => e.dispatchEvent(new Event('change')));
  await page.$eval('#temperature', (e) => { e.value = '0'; e.dispatchEvent(new Event('change')); });
  await page.$eval('#max_tokens', (e) => { e.value = '24'; e.dispatchEvent(new Event('change')); });
  await page.type('#system', 'You tell short stories.');
  await page.type('#prompt', 'Tell me about a dog.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('.assistant .stats')?.textContent.length > 0, { timeout: 30000 });
  const reply = await page.$eval('.assistant span', (e) => e.textContent);
  const stats = await page.$eval('.assistant .stats', (e) => e.textContent);
  check('the reply streamed into the conversation', reply.length > 0 && (await page.$$('.msg.user')).length === 1, reply);
  check('its stats line: first-token time, tokens, speed', /first token \d+ ms · \d+ tokens, [\d.–]+ tokens\/s/.test(stats), stats);
  const api = await (await fetch(url + '/v1/chat/completions', { method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ temperature: 0, max_tokens: 24, messages: [{ role: 'system', content: 'You tell short stories.' },
      { role: 'user', content: 'Tell me about a dog.' }] }) })).json();
  check('the same text as the API gives for the same request', reply === api.choices[0].message.content,
    `'${reply}' vs '${api.choices[0].message.content}'`);
  await page.waitForFunction(() => document.getElementById('model').textContent.includes('tokens of context'));
  check('the page names the model', /stories260K/.test(await page.$eval('#model', (e) => e.textContent)));
  // a long reply, stopped
  await page.$eval('#max_tokens', (e) => { e.value = '4000'; e.dispatchEvent(new Event('change')); });
  await page.type('#prompt', 'And then?');
  await page.evaluate(() => {   /* Stop is pressed by the page's own event loop as soon as text appears: a reply of
                                 * the tiny model can end before a click sent from here would land */
    const obs = new MutationObserver(() => {
      const s = document.querySelectorAll('.assistant span')[1];
      if (s && s.textContent.length > 0) { obs.disconnect(); document.getElementById('stop').click(); }
    });
    obs.observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
  });
  /* and the stream is throttled to 16 KB/s: the tiny model writes its whole 1000-token reply in ~70 ms, which
   * could reach the page before the click did (the reply then ended on its own, "length") */
  await page.emulateNetworkConditions({ download: 16 * 1024, upload: 1 << 20, latency: 0 });
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.assistant .stats')[1]?.textContent.length > 0, { timeout: 10000 });
  await page.emulateNetworkConditions(null);
  const stopped = await page.$$eval('.assistant .stats', (e) => e[1].textContent);
  check('Stop ends the reply', /stopped/.test(stopped), stopped);
  await page.screenshot({ path: process.env.SHOT || 'chat-page.png', fullPage: true });
  check('no request left the server, no script error', !foreign.length && !errors.length, foreign.concat(errors).join(' '));
} finally {
  await browser.close();
}
console.log(failed ? `${failed} chat-page check(s) failed` : 'all chat-page checks passed');
process.exit(failed ? 1 : 0);
