// A small stand-in for the browser's document, enough for the page's element builder (dom.js)
// and the drawer: elements, text, fragments, attributes, dataset, listeners, and querySelector
// for `tag`, `.class`, `[attr=value]` and their combinations. Not our component: the browser's.

export class FakeNode {
  constructor() {
    this.parentNode = null;
    this.childNodes = [];
  }

  get firstChild() {
    return this.childNodes[0] || null;
  }

  get textContent() {
    return this.childNodes.map((child) => child.textContent).join("");
  }

  set textContent(value) {
    this.replaceChildren(new FakeText(String(value)));
  }

  append(...nodes) {
    for (const node of nodes) {
      const adopted = node instanceof FakeNode ? node : new FakeText(String(node));
      if (adopted instanceof FakeFragment) {
        this.append(...adopted.childNodes.splice(0));
        continue;
      }
      adopted.parentNode?.childNodes.splice(adopted.parentNode.childNodes.indexOf(adopted), 1);
      adopted.parentNode = this;
      this.childNodes.push(adopted);
    }
  }

  replaceChildren(...nodes) {
    for (const child of this.childNodes) child.parentNode = null;
    this.childNodes = [];
    this.append(...nodes);
  }

  *descendants() {
    for (const child of this.childNodes) {
      if (child instanceof FakeElement) {
        yield child;
        yield* child.descendants();
      }
    }
  }

  querySelectorAll(selector) {
    const match = selector.match(/^([a-z0-9]*)(?:\.([\w-]+))?(?:\[([\w-]+)=([\w-]+)\])?$/);
    if (!match) throw new Error(`the fake document does not read the selector ${selector}`);
    const [, tag, cls, attr, value] = match;
    return [...this.descendants()].filter(
      (el) =>
        (!tag || el.tagName === tag) &&
        (!cls || el.className.split(/\s+/).includes(cls)) &&
        (!attr || el.getAttribute(attr) === value),
    );
  }

  querySelector(selector) {
    return this.querySelectorAll(selector)[0] || null;
  }
}

export class FakeText extends FakeNode {
  constructor(text) {
    super();
    this.text = text;
  }

  get textContent() {
    return this.text;
  }
}

export class FakeFragment extends FakeNode {}

export class FakeElement extends FakeNode {
  constructor(tag) {
    super();
    this.tagName = tag;
    this.className = "";
    this.dataset = {};
    this.attributes = new Map();
    this.listeners = new Map();
    this.hidden = false;
    this.tabIndex = 0;
    const properties = new Map();
    this.style = { setProperty: (name, value) => properties.set(name, value), getPropertyValue: (name) => properties.get(name) };
    this.classList = {
      add: (name) => (this.className = [...new Set([...this.className.split(" ").filter(Boolean), name])].join(" ")),
      remove: (name) => (this.className = this.className.split(" ").filter((n) => n && n !== name).join(" ")),
    };
  }

  setAttribute(name, value) {
    this.attributes.set(name, String(value));
    if (name === "hidden") this.hidden = true;
  }

  getAttribute(name) {
    return this.attributes.has(name) ? this.attributes.get(name) : null;
  }

  removeAttribute(name) {
    this.attributes.delete(name);
  }

  addEventListener(type, listener) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(listener);
  }

  focus() {
    this.focused = true;
  }
}

/** Install the fake as the global document (and Node, which dom.js tests children against). */
export function installFakeDocument() {
  const document = {
    body: new FakeElement("body"),
    createElement: (tag) => new FakeElement(tag),
    createTextNode: (text) => new FakeText(text),
    createDocumentFragment: () => new FakeFragment(),
  };
  globalThis.document = document;
  globalThis.Node = FakeNode;
  return document;
}
