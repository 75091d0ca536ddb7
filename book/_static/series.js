// sphinx-book-theme 1.4 and pydata-sphinx-theme 0.20 wire only the first ".primary-toggle"
// and ".secondary-toggle" of a page: the top bar's, which series.css hides (and which the
// theme hides on phones). The buttons a reader sees, in the article's bar, pass their
// click on to them: the sidebar folds on a laptop and opens as a drawer on a phone.
document.addEventListener("DOMContentLoaded", () => {
  for (const which of ["primary", "secondary"]) {
    const wired = document.querySelector(`.${which}-toggle`);
    if (!wired) continue;
    document.querySelectorAll(`.bd-header-article .${which}-toggle`).forEach((button) => {
      if (button === wired) return;
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        wired.click();
      });
    });
  }
});
