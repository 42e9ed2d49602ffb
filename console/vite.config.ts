// Builds the console into ../objstore/console/static (or $CONSOLE_OUT_DIR, for the CI check
// that the committed bundle matches these sources). Output names carry content hashes, so
// the same sources always give the same bytes.
import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

export default defineConfig({
  base: "/console/",
  plugins: [preact({ devToolsInProd: false, prefreshEnabled: false })],
  build: {
    outDir: process.env.CONSOLE_OUT_DIR || "../objstore/console/static",
    emptyOutDir: true,
    sourcemap: false,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
  },
});
