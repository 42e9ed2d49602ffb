// A tiny history router under /console/.
import { useEffect, useState } from "preact/hooks";

export const BASE = "/console/";

export function navigate(to: string): void {
  history.pushState(null, "", BASE + to.replace(/^\//, ""));
  window.dispatchEvent(new Event("popstate"));
}

export function useRoute(): { path: string; query: URLSearchParams } {
  const read = () => ({
    path: window.location.pathname.slice(BASE.length - 1) || "/",
    query: new URLSearchParams(window.location.search),
  });
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const changed = () => setRoute(read());
    window.addEventListener("popstate", changed);
    return () => window.removeEventListener("popstate", changed);
  }, []);
  return route;
}

export function Link(props: { to: string; children: any; class?: string }) {
  return (
    <a
      href={BASE + props.to.replace(/^\//, "")}
      class={props.class}
      onClick={(e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey) return;
        e.preventDefault();
        navigate(props.to);
      }}
    >
      {props.children}
    </a>
  );
}
